package fsm

import (
	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/lsm"
)

// MetricsProto summarizes engine metrics for the Cluster.Status response.
func MetricsProto(m *lsm.Metrics) *cairnpb.EngineMetrics {
	out := &cairnpb.EngineMetrics{
		Memtables:           uint64(m.MemTables),
		MemtableBytes:       uint64(m.MemTableBytes),
		Flushes:             uint64(m.Flushes),
		Compactions:         uint64(m.Compactions),
		BytesIngested:       uint64(m.BytesIngested),
		BytesAtOpen:         uint64(m.BytesAtOpen),
		WriteAmplification:  m.WriteAmplification,
		WalBytes:            uint64(m.WALBytes),
		WalSyncs:            uint64(m.WALSyncs),
		WriteStalls:         uint64(m.Stops),
		BlockCacheHits:      uint64(m.BlockCache.Hits),
		BlockCacheMisses:    uint64(m.BlockCache.Misses),
		BlockCacheSizeBytes: uint64(m.BlockCache.Size),
		BlobCacheHits:       uint64(m.Blob.Cache.Hits),
		BlobCacheMisses:     uint64(m.Blob.Cache.Misses),
		BlobCacheSizeBytes:  uint64(m.Blob.Cache.Size),
	}
	if m.BackgroundErr != nil {
		out.BackgroundError = m.BackgroundErr.Error()
	}
	for l, lm := range m.Levels {
		out.Levels = append(out.Levels, &cairnpb.EngineMetrics_Level{
			Level:     uint32(l),
			NumFiles:  uint64(lm.NumFiles),
			SizeBytes: uint64(lm.SizeBytes),
			Score:     lm.Score,
		})
	}
	return out
}
