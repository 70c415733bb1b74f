package metamorphic

import (
	"fmt"
	"math/rand/v2"

	"github.com/cairnkv/cairn/lsm"
)

// Config is a named set of engine options a workload runs under. Running
// one workload under several configs both checks each against the model and
// compares them with each other.
type Config struct {
	Name string
	// Opts are the options; Run sets FS.
	Opts lsm.Options
}

func (c Config) String() string {
	o := c.Opts
	return fmt.Sprintf("%s{memtable=%d blocks=%d restart=%d L0trigger=%d targetFile=%d lbase=%d mult=%d concurrentCompactions=%d compression=%v filterBits=%v memBloomBits=%v cache=%d walRecovery=%d walSyncRecord=%d disableWAL=%v walBuffered=%v minBlob=%d blobCompression=%v blobFile=%d blobCache=%d}",
		c.Name, o.MemTableSizeBytes, o.BlockSizeBytes, o.BlockRestartInterval, o.L0CompactionThreshold,
		o.TargetFileSizeBytes, o.LBaseMaxBytes, o.LevelMultiplier, o.MaxConcurrentCompactions, o.Compression, o.FilterBitsPerKey,
		o.MemtableBloomBitsPerKey, o.CacheSizeBytes, o.WALRecovery, o.WALSyncRecordBytes, o.DisableWAL, o.WALBufferedWrites,
		o.MinBlobSize, o.BlobCompression, o.BlobTargetFileSizeBytes, o.BlobCacheSizeBytes)
}

// Configs returns the option sets every workload runs under. Sizes that
// vary within a range (block size, target file size) are drawn from seed,
// so a seed replays exactly.
//
//   - default: the engine's defaults (zero Options): separation of values
//     from 4 KiB, Snappy blob files.
//   - tiny: 64 KiB memtables, 64–256 B blocks, L0 compaction at 2 files,
//     small target files and a small base level: flushes, compactions and
//     multi-file levels happen constantly, and the small block cache evicts;
//     every synced write records the WAL's size in the manifest; 1–4
//     concurrent compactions.
//   - nofilter: no SST filters and no memtable Bloom filter; separation
//     off (every value in the tables).
//   - zstd: Zstd compression, point-in-time WAL recovery.
//   - snappy: Snappy compression, a restart point at every key, 3 filter
//     bits per key (many false positives); WAL sizes recorded only when a
//     WAL is closed.
//   - nowal: the WAL disabled.
//   - blob64: key-value separation of values from 64 bytes (Snappy blob
//     files, as the tables), small blob files and a blob cache that
//     evicts, tiny memtables and files; 1–4 concurrent compactions.
//   - blob4k: separation of values from 4 KiB (the large ones only),
//     uncompressed blob files.
//
// zstd, snappy and blob64 also draw WALBufferedWrites (the WAL buffered
// and written by a goroutine), whose crashes must keep a prefix too.
func Configs(seed uint64) []Config {
	rng := rand.New(rand.NewPCG(seed, 0x636f6e666967))
	tinyBlock := 64 + rng.IntN(193)
	cs := []Config{
		{Name: "default"},
		{Name: "tiny", Opts: lsm.Options{
			MemTableSizeBytes:     64 << 10,
			BlockSizeBytes:        tinyBlock,
			BlockRestartInterval:  1 + rng.IntN(4),
			L0CompactionThreshold: 2,
			TargetFileSizeBytes:   int64(2<<10 + rng.IntN(6<<10)),
			LBaseMaxBytes:         64 << 10,
			LevelMultiplier:       4,
			CacheSizeBytes:        256 << 10,
			WALSyncRecordBytes:    1,
		}},
		{Name: "nofilter", Opts: lsm.Options{
			MemTableSizeBytes:       64 << 10,
			L0CompactionThreshold:   2,
			TargetFileSizeBytes:     32 << 10,
			BlockSizeBytes:          512,
			FilterBitsPerKey:        -1,
			MemtableBloomBitsPerKey: -1,
			MinBlobSize:             -1,
		}},
		{Name: "zstd", Opts: lsm.Options{
			MemTableSizeBytes:     64 << 10,
			Compression:           lsm.ZstdCompression,
			BlockSizeBytes:        1 << 10,
			L0CompactionThreshold: 3,
			TargetFileSizeBytes:   64 << 10,
			WALRecovery:           lsm.WALRecoverPointInTime,
		}},
		{Name: "snappy", Opts: lsm.Options{
			MemTableSizeBytes:    128 << 10,
			Compression:          lsm.SnappyCompression,
			BlockRestartInterval: 1,
			FilterBitsPerKey:     3,
			WALSyncRecordBytes:   -1,
		}},
		{Name: "nowal", Opts: lsm.Options{
			MemTableSizeBytes:     64 << 10,
			L0CompactionThreshold: 2,
			TargetFileSizeBytes:   16 << 10,
			DisableWAL:            true,
		}},
		{Name: "blob64", Opts: lsm.Options{
			MemTableSizeBytes:       64 << 10,
			L0CompactionThreshold:   2,
			TargetFileSizeBytes:     int64(4<<10 + rng.IntN(12<<10)),
			LBaseMaxBytes:           64 << 10,
			BlockSizeBytes:          512,
			MinBlobSize:             64,
			BlobTargetFileSizeBytes: int64(8<<10 + rng.IntN(56<<10)),
			BlobCacheSizeBytes:      64 << 10,
			MaxOpenBlobFiles:        4,
		}},
		{Name: "blob4k", Opts: lsm.Options{
			MemTableSizeBytes:     128 << 10,
			L0CompactionThreshold: 3,
			TargetFileSizeBytes:   32 << 10,
			MinBlobSize:           4096,
			BlobCompression:       lsm.NoCompression,
			WALSyncRecordBytes:    1,
		}},
	}
	// Drawn last, so that a seed still draws the other options it drew
	// before this one existed.
	for _, i := range []int{1, 6} { // tiny, blob64
		cs[i].Opts.MaxConcurrentCompactions = 1 + rng.IntN(4)
	}
	// Drawn after the above, for the same reason.
	for _, i := range []int{3, 4, 6} { // zstd, snappy, blob64
		cs[i].Opts.WALBufferedWrites = rng.IntN(2) == 1
	}
	return cs
}
