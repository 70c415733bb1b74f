// Copyright (c) HashiCorp, Inc
// SPDX-License-Identifier: MPL-2.0

package fs

import (
	"sort"
	"testing"
	"time"
)

// BenchmarkAppendSync appends a raft-entry-sized record to a preallocated
// segment and syncs it, as the segment writer does per StoreLogs (a cairn
// addition: the figure behind fdatasync in File.Sync, see README.cairn.md).
// It reports the p50 and p90 of the Sync calls besides the mean; run it
// in the data directory's file system (-benchdir is the temp dir's).
func BenchmarkAppendSync(b *testing.B) {
	wf, err := New().Create(b.TempDir(), "00001-abcd1234.wal", 64<<20)
	if err != nil {
		b.Fatal(err)
	}
	defer wf.Close()
	rec := make([]byte, 700)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := wf.WriteAt(rec, int64(i%(64<<20/len(rec)))*int64(len(rec))); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := wf.Sync(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds()), "p90-µs")
}
