package membership

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkReconcile measures one round over a 5-voter cluster with two
// ready non-voters, a failed voter and a new member: the size of a real
// cluster, with work for every phase.
func BenchmarkReconcile(b *testing.B) {
	now := t0.Add(time.Hour)
	in := Input{Now: now, Self: "n1", LeaderLastIndex: 1000, Policy: DefaultPolicy(),
		Progress: map[raft.ServerID]ServerProgress{}}
	for i := 1; i <= 8; i++ {
		id := fmt.Sprintf("n%d", i)
		s := raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":7000"), Suffrage: raft.Voter}
		if i > 5 {
			s.Suffrage = raft.Nonvoter
		}
		if i <= 7 {
			in.Config.Servers = append(in.Config.Servers, s)
		}
		m := Member{Meta: Meta{ID: id, RaftAddr: id + ":7000"}, State: StateAlive, StateChangedAt: t0}
		if i == 5 {
			m.State = StateDead
		}
		in.Members = append(in.Members, m)
		in.Progress[s.ID] = ServerProgress{LastIndex: 1000, LastContact: now, Healthy: i != 5, StableSince: t0}
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(Reconcile(in)) == 0 {
			b.Fatal("no actions")
		}
	}
}

func BenchmarkMetaEncode(b *testing.B) {
	m := testMeta("n1")
	b.ReportAllocs()
	for b.Loop() {
		_ = encodeMeta(m, false)
	}
}

func BenchmarkMetaDecode(b *testing.B) {
	buf := encodeMeta(testMeta("n1"), false)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := decodeMeta(buf); err != nil {
			b.Fatal(err)
		}
	}
}
