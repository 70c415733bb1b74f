package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// hashicorp/raft never completes a future still queued in its
		// apply channel when it shuts down (only a few kinds of future
		// watch its shutdown channel), so waitFuture's helper goroutine
		// for a write in flight on a node that stops waits forever. The
		// request itself returned when its context ended.
		goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error"),
	)
}
