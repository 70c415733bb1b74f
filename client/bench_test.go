package client

import (
	"context"
	"fmt"
	"testing"
)

// The client's own cost per call (routing, sessions, retries bookkeeping,
// gRPC over an in-memory connection) against the fake cluster.

func BenchmarkPut(b *testing.B) {
	fc := newFakeCluster(b, 1)
	fc.setLeader(fc.addrs()[0])
	c := fc.client(Config{})
	ctx := context.Background()
	value := make([]byte, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := c.Put(ctx, fmt.Appendf(nil, "k%d", i%1024), value); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPutParallel(b *testing.B) {
	fc := newFakeCluster(b, 1)
	fc.setLeader(fc.addrs()[0])
	c := fc.client(Config{})
	ctx := context.Background()
	value := make([]byte, 256)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if _, err := c.Put(ctx, fmt.Appendf(nil, "k%d", i%1024), value); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGet(b *testing.B) {
	fc := newFakeCluster(b, 1)
	fc.setLeader(fc.addrs()[0])
	c := fc.client(Config{})
	ctx := context.Background()
	if _, err := c.Put(ctx, []byte("k"), make([]byte, 256)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Get(ctx, []byte("k")); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScan1000(b *testing.B) {
	fc := newFakeCluster(b, 1)
	fc.setLeader(fc.addrs()[0])
	c := fc.client(Config{})
	ctx := context.Background()
	for i := range 1000 {
		if _, err := c.Put(ctx, fmt.Appendf(nil, "k%04d", i), make([]byte, 64)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		n := 0
		it := c.Scan(ctx, nil, nil, WithPageSize(250))
		for it.Next() {
			n++
		}
		if it.Close() != nil || n != 1000 {
			b.Fatal(n, it.Err())
		}
	}
}
