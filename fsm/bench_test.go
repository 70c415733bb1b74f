package fsm

import (
	"fmt"
	"testing"

	"github.com/cairnkv/cairn/lsm/vfs"
	"github.com/hashicorp/raft"
)

// BenchmarkApplyBatch applies batches of 256 Puts of 256-byte values (new
// keys, with client sessions) to an FSM on the OS file system, as raft
// hands them over under load.
func BenchmarkApplyBatch(b *testing.B) {
	for _, sessions := range []bool{false, true} {
		b.Run(fmt.Sprintf("puts=256/value=256/sessions=%v", sessions), func(b *testing.B) {
			f := openTest(b, vfs.Default, b.TempDir(), &Options{})
			g := newLogGen()
			value := string(make([]byte, 256))
			batches := make([][]*raft.Log, b.N)
			for i := range batches {
				batch := make([]*raft.Log, 256)
				for j := range batch {
					req := put(fmt.Sprintf("key-%012d", i*256+j), value)
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
