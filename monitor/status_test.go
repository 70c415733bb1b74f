package monitor

import (
	"context"
	"flag"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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
