package monitor

import (
	"context"
	"flag"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/cluster"
)

var screenshotOut = flag.String("screenshot-out", "", "also save the status page's screenshot here (docs/status-page.png)")

// chromiumPath returns the headless browser the page test uses, or "".
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// chromium runs headless chromium with args, bounded by a minute.
func chromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// --no-sandbox: CI runs as root, where chromium refuses its sandbox.
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), "--hide-scrollbars"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// TestStatusPageInBrowser loads the status page of a 3-node cluster in
// headless chromium and checks that the browser's DOM shows the three
// members, the leader and the LSM shape; it saves a screenshot in the
// test's temp dir (and with -screenshot-out, there too).
func TestStatusPageInBrowser(t *testing.T) {
	bin := chromiumPath()
	if bin == "" {
		if os.Getenv("CAIRN_REQUIRE_CHROMIUM") != "" {
			t.Fatal("CAIRN_REQUIRE_CHROMIUM is set and no chromium is installed (.ci/run installs Debian's chromium package)")
		}
		t.Skip("no chromium: apt-get install chromium to run the status page test")
	}
	nodes, urls := testCluster(t)
	li := leaderIndex(t, nodes)
	leader := nodes[li].ID()
	url := urls[(li+1)%len(urls)] + "/" // a follower's page: it asks the others

	// The server's own answer first: a clear failure if it is not HTML.
	code, body := httpGet(t, url)
	if code != http.StatusOK || !strings.Contains(body, "<!DOCTYPE html>") {
		t.Fatalf("GET /: %d %.300s", code, body)
	}

	dom := string(chromium(t, bin, "--dump-dom", url))
	for _, n := range nodes {
		row := regexp.MustCompile(`<tr class="member[^"]*" data-id="` + n.ID() + `">\s*<td>` + n.ID())
		if !row.MatchString(dom) {
			t.Errorf("member %s has no row in the rendered page", n.ID())
		}
	}
	if strings.Contains(dom, "unreachable") {
		t.Errorf("the page shows a member as unreachable")
	}
	if !strings.Contains(dom, `<span id="leader" class="leader">`+leader+`</span>`) {
		t.Errorf("leader %s not shown as the leader", leader)
	}
	if got := strings.Count(dom, `<div class="node">`); got != len(nodes) {
		t.Errorf("%d LSM shape panels, want %d", got, len(nodes))
	}
	if !strings.Contains(dom, "<th>blob cache hits</th>") {
		t.Error("the members table has no blob cache column")
	}
	if got := regexp.MustCompile(`<td class="num sampled">\+[0-9.]+ms</td>`).FindAllString(dom, -1); len(got) != len(nodes) || !strings.Contains(dom, `id="sampling"`) {
		t.Errorf("%d rows say when they were sampled, want %d (and the note)", len(got), len(nodes))
	}
	if !strings.Contains(dom, `<table id="leader-changes">`) || !strings.Contains(dom, "<td>"+leader+"</td>") {
		t.Errorf("the leader changes table does not name the leader %s", leader)
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}

	shot := filepath.Join(t.TempDir(), "status-page.png")
	chromium(t, bin, "--window-size=1280,860", "--screenshot="+shot, url)
	png, err := os.ReadFile(shot)
	if err != nil || len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s: %v (%d bytes)", shot, err, len(png))
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if *screenshotOut != "" {
		if err := os.WriteFile(*screenshotOut, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHitRatio(t *testing.T) {
	for _, c := range []struct {
		hits, misses uint64
		want         string
	}{{0, 0, "-"}, {1, 3, "25.0%"}, {2, 0, "100.0%"}} {
		if got := hitRatio(c.hits, c.misses); got != c.want {
			t.Errorf("hitRatio(%d, %d) = %q, want %q", c.hits, c.misses, got, c.want)
		}
	}
}

// TestStatusPageSampling renders the page for members sampled at different
// moments, one follower's commit index above the leader's: every row says
// when it was sampled, the higher commit index is marked and explained,
// and the leader's page shows its own record of each follower's match
// index (a follower's page says where to find it).
func TestStatusPageSampling(t *testing.T) {
	member := func(id string, leader bool) *cairnpb.Member {
		return &cairnpb.Member{Id: id, Suffrage: cairnpb.Suffrage_VOTER, Status: cairnpb.MemberStatus_ALIVE, Leader: leader}
	}
	status := func(id string, state cairnpb.RaftState, commit uint64) *cairnpb.StatusResponse {
		return &cairnpb.StatusResponse{NodeId: id, State: state, LeaderId: "n1", Term: 4, CommitIndex: commit, AppliedIndex: commit, LastLogIndex: commit + 2}
	}
	statuses := []cluster.MemberStatus{
		{Member: member("n1", true), Status: status("n1", cairnpb.RaftState_LEADER, 100)},
		{Member: member("n2", false), Status: status("n2", cairnpb.RaftState_FOLLOWER, 103),
			Replication: &cluster.Replication{Term: 4, MatchIndex: 105, Since: 12 * time.Millisecond}},
		{Member: member("n3", false), Status: status("n3", cairnpb.RaftState_FOLLOWER, 99)},
	}
	sampled := []time.Duration{time.Millisecond, 30 * time.Millisecond, 2 * time.Millisecond}
	page := func(self string) string {
		t.Helper()
		n := &fakeNode{id: self, status: status(self, cairnpb.RaftState_FOLLOWER, 0), statuses: statuses, sampled: sampled}
		rec := httptest.NewRecorder()
		(&statusPage{node: n, log: slog.New(slog.DiscardHandler)}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s's page: %d %s", self, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	sampledMs := func(body, id string) float64 {
		t.Helper()
		m := regexp.MustCompile(`data-id="` + id + `">(?s:.*?)<td class="num sampled">\+([0-9.]+)ms</td>`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("%s's row has no sampling time:\n%s", id, body)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}

	leaderPage := page("n1")
	if a, b, c := sampledMs(leaderPage, "n1"), sampledMs(leaderPage, "n2"), sampledMs(leaderPage, "n3"); !(a < c && c < b) || a < 1 || b < 30 {
		t.Errorf("sampled n1 +%vms, n2 +%vms, n3 +%vms; want about +1, +30, +2", a, b, c)
	}
	for _, re := range []string{
		`<th>sampled</th>`,
		`<th>match \(leader's view\)</th>`,
		`data-id="n2">(?s:.*?)<td class="num ahead">103 †</td>`,
		`data-id="n2">(?s:.*?)<td class="num match">105 <span class="muted">\(12ms ago\)</span></td>`,
		`data-id="n3">(?s:.*?)<td class="num">99</td>(?s:.*?)<td class="num match">no answer this term</td>`,
		`data-id="n1">(?s:.*?)<td class="num">100</td>(?s:.*?)<td class="num match">-</td>`,
		`<p class="muted note ahead" id="commit-ahead">† A commit index above the leader's`,
		`<i>match</i> is this leader's own record`,
	} {
		if !regexp.MustCompile(re).MatchString(leaderPage) {
			t.Errorf("the leader's page lacks %s", re)
		}
	}
	if strings.Count(leaderPage, "†") != 2 {
		t.Errorf("want one commit index marked (and its note):\n%s", leaderPage)
	}

	followerPage := page("n3")
	if strings.Contains(followerPage, "match (leader's view)") || !strings.Contains(followerPage, "The leader's page also shows its own record") {
		t.Errorf("a follower's page: want no match column, and where to find it")
	}
	if !strings.Contains(followerPage, `id="commit-ahead"`) || sampledMs(followerPage, "n2") < 30 {
		t.Errorf("a follower's page: want the sampling times and the commit index above the leader's explained")
	}
	if t.Failed() {
		t.Logf("leader's page:\n%s", leaderPage)
	}
}
