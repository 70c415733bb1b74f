package monitor

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster"
)

// statusTimeout bounds the status page's questions to the members.
const statusTimeout = 2 * time.Second

// refreshSeconds is how often the page reloads itself.
const refreshSeconds = 5

//go:embed status.html
var statusHTML string

var statusTemplate = template.Must(template.New("status").Parse(statusHTML))

// statusPage renders the cluster as the node serving it sees it: every
// member's raft state and engine shape (asked over Cluster.Status), the
// leader, and the leader changes this node saw. Server-rendered; the page
// refreshes itself with a meta tag, so it needs no JavaScript.
//
// Each member's term and indexes are its own, read when it answered, and
// the answers arrive at different moments while the log moves on: a
// follower that answered after the leader may show a commit index above
// the leader's. So each row says when its answer arrived ("sampled", after
// the page's questions went out); the serving node reads its own Status
// last (on the leader's page the leader's commit index is then at or
// above every follower's of its term); a commit index above the leader's
// is marked and explained; and the leader's page adds its own record of
// each follower's acknowledged index ("match"), read at one moment for
// all (cluster.MemberStatus.Replication).
type statusPage struct {
	node Node
	log  *slog.Logger
}

// pageData is what status.html renders.
type pageData struct {
	Self, Leader   string
	Now            string
	RefreshSeconds int
	Err            string
	Members        []memberRow
	// LeaderView: this node leads, and the rows show its record of each
	// follower's match index.
	LeaderView bool
	// CommitAhead: some row's commit index is above the leader's.
	CommitAhead   bool
	LeaderChanges int
	Recent        []changeRow
}

type memberRow struct {
	ID, Suffrage, Gossip, State string
	IsLeader, IsSelf            bool
	Term, Commit, Applied       uint64
	// Sampled is when the member's answer arrived, after the page's
	// questions went out ("1.2ms"; the page shows "+1.2ms").
	Sampled string
	// Match is the leader's record of the highest index the member
	// acknowledged (LeaderView only), MatchAge how long ago the member
	// last answered the leader.
	Match, MatchAge string
	// CommitAhead: the member's commit index is above the leader's, as
	// each was sampled.
	CommitAhead       bool
	LastContact       string
	CacheHitRatio     string
	BlobCacheHitRatio string
	WriteAmp          string
	Err               string
	Levels            []levelRow
}

type levelRow struct {
	Name  string
	Files uint64
	Size  string
	// Percent is the bar's width: the level's bytes relative to the
	// largest level of any member.
	Percent float64
}

type changeRow struct {
	Time, Leader string
	Term         uint64
}

func (p *statusPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), statusTimeout)
	defer cancel()
	d := p.data(ctx)
	var buf bytes.Buffer
	if err := statusTemplate.Execute(&buf, d); err != nil {
		p.log.Warn("monitor: rendering the status page", "err", err)
		http.Error(w, "rendering the status page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

func (p *statusPage) data(ctx context.Context) *pageData {
	start := time.Now()
	d := &pageData{Self: p.node.ID(), Now: start.UTC().Format("2006-01-02 15:04:05.000 MST"), RefreshSeconds: refreshSeconds}
	if st := p.node.Status(); st != nil {
		d.Leader = st.GetLeaderId()
	}
	total, recent := p.node.LeaderChanges()
	d.LeaderChanges = int(total)
	for _, c := range recent {
		leader := c.LeaderID
		if leader == "" {
			leader = "(none)"
		}
		d.Recent = append(d.Recent, changeRow{Time: c.Time.UTC().Format("15:04:05.000"), Leader: leader, Term: c.Term})
	}
	statuses, err := p.node.MemberStatuses(ctx)
	if err != nil {
		d.Err = err.Error()
		return d
	}
	var maxLevel uint64
	for _, ms := range statuses {
		for _, l := range ms.Status.GetEngine().GetLevels() {
			maxLevel = max(maxLevel, l.GetSizeBytes())
		}
	}
	leader := leaderStatus(statuses)
	d.LeaderView = leader != nil && leader.Member.GetId() == d.Self
	for i, ms := range statuses {
		m := ms.Member
		row := memberRow{
			ID:       m.GetId(),
			Suffrage: suffrageName(m),
			Gossip:   memberStatusName(m.GetStatus()),
			IsLeader: m.GetLeader(),
			IsSelf:   m.GetId() == d.Self,
		}
		if ms.Err != nil {
			row.Err = ms.Err.Error()
			d.Members = append(d.Members, row)
			continue
		}
		st := ms.Status
		row.State = stateName(st.GetState())
		row.Term, row.Commit, row.Applied = st.GetTerm(), st.GetCommitIndex(), st.GetAppliedIndex()
		row.Sampled = sinceText(ms.SampledAt.Sub(start))
		if leader != nil && &statuses[i] != leader && st.GetCommitIndex() > leader.Status.GetCommitIndex() {
			row.CommitAhead, d.CommitAhead = true, true
		}
		if d.LeaderView {
			switch r := ms.Replication; {
			case m.GetId() == d.Self:
				row.Match = "-"
			case r == nil:
				row.Match = "no answer this term"
			default:
				row.Match, row.MatchAge = fmt.Sprint(r.MatchIndex), r.Since.Round(time.Millisecond).String()
			}
		}
		switch c := st.GetLastLeaderContactMs(); {
		case st.GetState() == cairnpb.RaftState_LEADER:
			row.LastContact = "-"
		case c < 0:
			row.LastContact = "never"
		default:
			row.LastContact = (time.Duration(c) * time.Millisecond).String()
		}
		e := st.GetEngine()
		row.CacheHitRatio = hitRatio(e.GetBlockCacheHits(), e.GetBlockCacheMisses())
		row.BlobCacheHitRatio = hitRatio(e.GetBlobCacheHits(), e.GetBlobCacheMisses())
		row.WriteAmp = fmt.Sprintf("%.2f", e.GetWriteAmplification())
		for _, l := range e.GetLevels() {
			lr := levelRow{Name: fmt.Sprintf("L%d", l.GetLevel()), Files: l.GetNumFiles(), Size: humanBytes(l.GetSizeBytes())}
			if maxLevel > 0 {
				lr.Percent = 100 * float64(l.GetSizeBytes()) / float64(maxLevel)
			}
			row.Levels = append(row.Levels, lr)
		}
		d.Members = append(d.Members, row)
	}
	return d
}

// leaderStatus returns the status of the member that answered as leader
// in the highest term, nil if none did.
func leaderStatus(statuses []cluster.MemberStatus) *cluster.MemberStatus {
	var l *cluster.MemberStatus
	for i := range statuses {
		st := statuses[i].Status
		if statuses[i].Err == nil && st.GetState() == cairnpb.RaftState_LEADER && (l == nil || st.GetTerm() > l.Status.GetTerm()) {
			l = &statuses[i]
		}
	}
	return l
}

// sinceText formats when an answer arrived after the questions went out,
// in milliseconds.
func sinceText(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(max(d, 0))/float64(time.Millisecond))
}

func stateName(s cairnpb.RaftState) string {
	if s == cairnpb.RaftState_RAFT_STATE_UNSPECIFIED {
		return "unknown"
	}
	return strings.ToLower(s.String())
}

func memberStatusName(s cairnpb.MemberStatus) string {
	if s == cairnpb.MemberStatus_MEMBER_STATUS_UNKNOWN {
		return "unknown"
	}
	return strings.ToLower(s.String())
}

func suffrageName(m *cairnpb.Member) string {
	switch m.GetSuffrage() {
	case cairnpb.Suffrage_VOTER:
		return "voter"
	case cairnpb.Suffrage_NONVOTER:
		return "nonvoter"
	}
	return "none"
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// hitRatio formats a cache's hit ratio, "-" before any lookup.
func hitRatio(hits, misses uint64) string {
	if hits+misses == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(hits)/float64(hits+misses))
}
