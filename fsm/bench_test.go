package fsm

import (
	"fmt"
	"testing"

	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
)

// BenchmarkApplyBatch applies batches of 256 Puts of 256-byte values (new
// keys, or overwrites of 20,000 existing keys as in the cluster benchmark,
// with client sessions) to an FSM on the OS file system, as raft hands them
// over under load.
func BenchmarkApplyBatch(b *testing.B) {
	for _, bc := range []struct{ sessions, overwrite bool }{{false, false}, {true, false}, {true, true}} {
		sessions := bc.sessions
		b.Run(fmt.Sprintf("puts=256/value=256/sessions=%v/overwrite=%v", sessions, bc.overwrite), func(b *testing.B) {
			f := openTest(b, vfs.Default, b.TempDir(), &Options{})
			g := newLogGen()
			value := string(make([]byte, 256))
			const existing = 20000
			keyOf := func(i int) string { return fmt.Sprintf("key-%012d", i) }
			if bc.overwrite {
				for i := 0; i < existing; i += 256 {
					batch := make([]*raft.Log, 0, 256)
					for j := i; j < min(i+256, existing); j++ {
						batch = append(batch, g.cmd(b, put(keyOf(j), value)))
					}
					f.ApplyBatch(batch)
				}
				keyOf = func(i int) string { return fmt.Sprintf("key-%012d", (i*7919)%existing) }
			}
			batches := make([][]*raft.Log, b.N)
			for i := range batches {
				batch := make([]*raft.Log, 256)
				for j := range batch {
					req := put(keyOf(i*256+j), value)
					if sessions {
						req.ClientId, req.Seq = fmt.Sprintf("client-%d", j%64), uint64(i*4+j/64+1)
					}
					batch[j] = g.cmd(b, req)
				}
				batches[i] = batch
			}
			b.SetBytes(256 * 256)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				for _, r := range f.ApplyBatch(batches[i]) {
					if err, ok := r.(error); ok {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*256), "ns/put")
		})
	}
}
