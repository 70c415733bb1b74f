package record

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

var benchSizes = []int{64, 1 << 10, 32 << 10, 256 << 10}

func BenchmarkWriteRecord(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			rec := bytes.Repeat([]byte{'v'}, size)
			w := NewWriter(io.Discard)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := w.WriteRecord(rec); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

func BenchmarkNext(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			rec := bytes.Repeat([]byte{'v'}, size)
			var buf bytes.Buffer
			w := NewWriter(&buf)
			n := 0
			for ; n < 1000 && buf.Len() < 64<<20; n++ {
				w.WriteRecord(rec)
			}
			w.Close()
			data := buf.Bytes()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			var r *Reader
			for i := 0; i < b.N; i++ {
				if i%n == 0 {
					b.StopTimer()
					r = NewReader(bytes.NewReader(data))
					b.StartTimer()
				}
				if _, err := r.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
