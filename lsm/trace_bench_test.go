package lsm

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairnkv/cairn/trace"
)

// BenchmarkReadRandomTrace is readrandom (BenchmarkReadRandom/tables) with
// no trace running ("off") and while a trace records every access to a
// file ("on"). Built with -tags cairn_notrace, "off" is the read path
// without the tracer check, the baseline of the idle-cost figure.
func BenchmarkReadRandomTrace(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run(mode, func(b *testing.B) {
			if mode == "on" && !traceHooks {
				b.Skip("built without trace hooks")
			}
			d := benchDB(b)
			n := benchKeys
			fillDB(b, d, n)
			if err := d.Compact(nil, nil); err != nil {
				b.Fatal(err)
			}
			if mode == "on" {
				f, err := os.Create(filepath.Join(b.TempDir(), "trace"))
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				if err := d.StartTrace(trace.Options{}, f); err != nil {
					b.Fatal(err)
				}
				defer func() {
					d.EndTrace()
					if st, err := f.Stat(); err == nil {
						b.ReportMetric(float64(st.Size())/float64(b.N), "tracebytes/op")
					}
				}()
			}
			rng := rand.New(rand.NewPCG(2, 2))
			var key []byte
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				key = benchKey(key, rng.Uint64N(uint64(n)))
				if _, err := d.Get(key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
