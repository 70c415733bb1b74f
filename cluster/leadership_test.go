package cluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A leadership transfer that did not happen is retryable (Unavailable, no
// NotLeader detail) with a message that says what happened; before, raft's
// timeout reached clients as Internal ("internal error: leadership transfer
// timeout") and a transfer in progress as NotLeader.
func TestTransferErrorStatus(t *testing.T) {
	n := &Node{}
	for _, tc := range []struct {
		err    error
		target string
		code   codes.Code
		msg    string
	}{
		// raft v1.7.3 raft.go: err := fmt.Errorf("leadership transfer timeout")
		{fmt.Errorf("leadership transfer timeout"), "n2", codes.Unavailable, "timed out: n2 did not win an election"},
		{fmt.Errorf("leadership transfer timeout"), "", codes.Unavailable, "timed out: the most up-to-date voter did not win"},
		{raft.ErrLeadershipTransferInProgress, "", codes.Unavailable, "another leadership transfer is in progress"},
		{raft.ErrRaftShutdown, "", codes.Unavailable, "node shutting down"},
		{errors.New("something else"), "", codes.Internal, "something else"},
	} {
		st, _ := status.FromError(n.toStatus(transferError(tc.err, tc.target)))
		if st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("%v: status %v %q, want %v containing %q", tc.err, st.Code(), st.Message(), tc.code, tc.msg)
		}
		if tc.code == codes.Unavailable && len(st.Details()) != 0 {
			t.Errorf("%v: unexpected details %v", tc.err, st.Details())
		}
	}
}
