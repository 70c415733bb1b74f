package membership

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// nopFSM is a raft.FSM that ignores everything.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnapshot{}, nil }
func (nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type nopSnapshot struct{}

func (nopSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (nopSnapshot) Release()                             {}

// newInmemRaft starts a raft node on the in-memory transport with fast
// timings.
func newInmemRaft(t *testing.T, id raft.ServerID) (*raft.Raft, *raft.InmemTransport) {
	t.Helper()
	conf := raft.DefaultConfig()
	conf.LocalID = id
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.LogOutput = io.Discard
	store := raft.NewInmemStore()
	_, trans := raft.NewInmemTransport(raft.ServerAddress(id))
	r, err := raft.NewRaft(conf, nopFSM{}, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Shutdown().Error(); err != nil {
			t.Error(err)
		}
		trans.Close()
	})
	return r, trans
}

func configString(t *testing.T, r *raft.Raft) (string, uint64) {
	t.Helper()
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	servers := slices.Clone(f.Configuration().Servers)
	slices.SortFunc(servers, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	var parts []string
	for _, s := range servers {
		parts = append(parts, fmt.Sprintf("%s=%s@%s", s.ID, s.Suffrage, s.Address))
	}
	return strings.Join(parts, " "), f.Index()
}

// TestApplierRaft applies every kind of action to a real (in-memory) raft
// cluster of a leader and a follower, chaining the configuration indexes.
func TestApplierRaft(t *testing.T) {
	r1, t1 := newInmemRaft(t, "n1")
	r2, t2 := newInmemRaft(t, "n2")
	t1.Connect(t2.LocalAddr(), t2)
	t2.Connect(t1.LocalAddr(), t1)
	if err := r1.BootstrapCluster(raft.Configuration{Servers: []raft.Server{
		{Suffrage: raft.Voter, ID: "n1", Address: t1.LocalAddr()},
	}}).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "n1 to lead", func() error {
		if r1.State() != raft.Leader {
			return fmt.Errorf("n1 is %s", r1.State())
		}
		return nil
	})
	a := &Applier{Raft: r1, Timeout: time.Second}
	apply := func(actions []Action, want string) {
		t.Helper()
		_, index := configString(t, r1)
		n, err := a.Apply(index, actions)
		if err != nil || n != len(actions) {
			t.Fatalf("Apply(%v): %d, %v", actions, n, err)
		}
		if got, _ := configString(t, r1); got != want {
			t.Fatalf("after %v:\n got %s\nwant %s", actions, got, want)
		}
	}

	// n9 exists only in the configuration; as a non-voter it does not
	// stop commits.
	apply([]Action{
		{Kind: AddNonvoter, ID: "n2", Addr: t2.LocalAddr()},
		{Kind: AddNonvoter, ID: "n9", Addr: "nowhere:1"},
	}, "n1=Voter@n1 n2=Nonvoter@n2 n9=Nonvoter@nowhere:1")
	apply([]Action{
		{Kind: UpdateAddress, ID: "n9", Addr: "nowhere:2"},
		{Kind: PromoteVoter, ID: "n2", Addr: t2.LocalAddr()},
	}, "n1=Voter@n1 n2=Voter@n2 n9=Nonvoter@nowhere:2")
	// An address update keeps a voter a voter.
	apply([]Action{{Kind: UpdateAddress, ID: "n2", Addr: t2.LocalAddr()}}, "n1=Voter@n1 n2=Voter@n2 n9=Nonvoter@nowhere:2")
	apply([]Action{
		{Kind: RemoveServer, ID: "n9", Addr: "nowhere:2"},
		{Kind: DemoteVoter, ID: "n2", Addr: t2.LocalAddr()},
	}, "n1=Voter@n1 n2=Nonvoter@n2")
	waitFor(t, 5*time.Second, "n2 to see the configuration", func() error {
		f := r2.GetConfiguration()
		if err := f.Error(); err != nil {
			return err
		}
		if n := len(f.Configuration().Servers); n != 2 {
			return fmt.Errorf("n2 has %d servers", n)
		}
		return nil
	})

	// A stale configuration index: raft refuses and Apply stops at once.
	_, index := configString(t, r1)
	if n, err := a.Apply(index-1, []Action{
		{Kind: RemoveServer, ID: "n2", Addr: t2.LocalAddr()},
		{Kind: AddNonvoter, ID: "n8", Addr: "nowhere:8"},
	}); n != 0 || err == nil || !strings.Contains(err.Error(), "configuration changed") {
		t.Fatalf("stale index: %d, %v", n, err)
	}
	if got, _ := configString(t, r1); got != "n1=Voter@n1 n2=Nonvoter@n2" {
		t.Fatalf("after a refused change: %s", got)
	}
}

// fakeRaft records the calls an Applier makes.
type fakeRaft struct {
	calls  []string
	failAt int // 1-based call number that fails; 0: none
	index  uint64
}

type fakeFuture struct {
	err   error
	index uint64
}

func (f fakeFuture) Error() error  { return f.err }
func (f fakeFuture) Index() uint64 { return f.index }

func (r *fakeRaft) call(s string) raft.IndexFuture {
	r.calls = append(r.calls, s)
	if len(r.calls) == r.failAt {
		return fakeFuture{err: errors.New("boom")}
	}
	r.index += 10
	return fakeFuture{index: r.index}
}

func (r *fakeRaft) AddNonvoter(id raft.ServerID, addr raft.ServerAddress, prev uint64, _ time.Duration) raft.IndexFuture {
	return r.call(fmt.Sprintf("AddNonvoter(%s,%s,%d)", id, addr, prev))
}
func (r *fakeRaft) AddVoter(id raft.ServerID, addr raft.ServerAddress, prev uint64, _ time.Duration) raft.IndexFuture {
	return r.call(fmt.Sprintf("AddVoter(%s,%s,%d)", id, addr, prev))
}
func (r *fakeRaft) DemoteVoter(id raft.ServerID, prev uint64, _ time.Duration) raft.IndexFuture {
	return r.call(fmt.Sprintf("DemoteVoter(%s,%d)", id, prev))
}
func (r *fakeRaft) RemoveServer(id raft.ServerID, prev uint64, _ time.Duration) raft.IndexFuture {
	return r.call(fmt.Sprintf("RemoveServer(%s,%d)", id, prev))
}

func TestApplierChainsIndexes(t *testing.T) {
	actions := []Action{
		{Kind: RemoveServer, ID: "a"},
		{Kind: UpdateAddress, ID: "b", Addr: "b:2"},
		{Kind: DemoteVoter, ID: "c"},
		{Kind: PromoteVoter, ID: "d", Addr: "d:1"},
		{Kind: AddNonvoter, ID: "e", Addr: "e:1"},
	}
	r := &fakeRaft{index: 100}
	n, err := (&Applier{Raft: r}).Apply(7, actions)
	if err != nil || n != 5 {
		t.Fatalf("Apply: %d, %v", n, err)
	}
	want := "RemoveServer(a,7) AddNonvoter(b,b:2,110) DemoteVoter(c,120) AddVoter(d,d:1,130) AddNonvoter(e,e:1,140)"
	if got := strings.Join(r.calls, " "); got != want {
		t.Fatalf("calls\n got %s\nwant %s", got, want)
	}

	r = &fakeRaft{failAt: 2}
	n, err = (&Applier{Raft: r}).Apply(7, actions)
	if n != 1 || err == nil || !strings.Contains(err.Error(), "update-address b") || len(r.calls) != 2 {
		t.Fatalf("failing second action: %d, %v, calls %v", n, err, r.calls)
	}
	if n, err := (&Applier{Raft: &fakeRaft{}}).Apply(0, []Action{{Kind: 0, ID: "x"}}); n != 0 || err == nil {
		t.Fatalf("unknown kind: %d, %v", n, err)
	}
}
