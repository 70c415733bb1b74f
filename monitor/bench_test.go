package monitor

import (
	"context"
	"testing"

	"google.golang.org/grpc"
)

// BenchmarkUnaryInterceptor is the cost the metrics interceptors add to
// each unary gRPC call (counters and a latency histogram per method and
// code).
func BenchmarkUnaryInterceptor(b *testing.B) {
	m, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	icpt := m.grpc.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/cairn.v1.KV/Get"}
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := icpt(ctx, nil, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}
