package lsm

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/cairnkv/cairn/lsm/vfs/errorfs"
)

// cancelTestTimeout bounds the waits of these tests for a call that must
// return: it is a guard against a hang, not a measure of promptness.
const cancelTestTimeout = time.Minute

func recvErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(cancelTestTimeout):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// TestWaitBackgroundIdleReturnsBackgroundError: a background flush fails
// (its table's sync), and waitBackgroundIdle returns that error instead of
// nothing, or of waiting for ever for the memtables a DB stopped by a
// background error never flushes (which it once did).
func TestWaitBackgroundIdleReturnsBackgroundError(t *testing.T) {
	var armed atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if armed.Load() && op == errorfs.OpSync && strings.HasSuffix(path, ".sst") {
			return errorfs.ErrInjected
		}
		return nil
	})
	d := mustOpen(t, "db", testOptions(errorfs.Wrap(vfs.NewMem(), inj)))
	armed.Store(true)
	// Past MemTableSizeBytes several times: the background flush runs,
	// and fails; the writes after it may fail with its error.
	for i := range 4000 {
		k := fmt.Sprintf("k%05d", i)
		if err := d.Put([]byte(k), blobValueFor(k, 0, 100), NoSync); err != nil {
			if !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("Put: %v", err)
			}
			break
		}
	}
	idle := make(chan error, 1)
	go func() { idle <- waitBackgroundIdle(d) }()
	if err := recvErr(t, idle, "waitBackgroundIdle"); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("waitBackgroundIdle = %v, want the flush's injected error", err)
	}
	armed.Store(false)
	if err := d.Close(); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Close = %v, want the background error", err)
	}
}
