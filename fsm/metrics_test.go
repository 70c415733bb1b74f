package fsm

import (
	"testing"

	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/blob"
)

// MetricsProto carries both caches' figures to Cluster.Status (the status
// page shows both hit ratios).
func TestMetricsProtoCaches(t *testing.T) {
	m := &lsm.Metrics{}
	m.BlockCache.Hits, m.BlockCache.Misses, m.BlockCache.Size = 1, 2, 3
	m.Blob.Cache = blob.CacheMetrics{Hits: 4, Misses: 5, Size: 6}
	p := MetricsProto(m)
	if p.GetBlockCacheHits() != 1 || p.GetBlockCacheMisses() != 2 || p.GetBlockCacheSizeBytes() != 3 ||
		p.GetBlobCacheHits() != 4 || p.GetBlobCacheMisses() != 5 || p.GetBlobCacheSizeBytes() != 6 {
		t.Fatalf("cache figures: %v", p)
	}
}
