package metamorphic

import (
	"fmt"
	"slices"
	"strings"
)

// goRepro renders a workload as a standalone Go test against package lsm
// that fails where the engine disagrees with the model: a bug report that
// needs nothing of this package.
func goRepro(cfg Config, ops []Op) string {
	var b strings.Builder
	bs := func(v []byte) string {
		if v == nil {
			return "nil"
		}
		return fmt.Sprintf("[]byte(%q)", v)
	}
	wo := func(sync bool) string {
		if sync {
			return "lsm.Sync"
		}
		return "lsm.NoSync"
	}
	want := func(m *model, key []byte) string {
		if v, ok := m.get(key); ok {
			return bs(v)
		}
		return "nil"
	}
	o := cfg.Opts
	fmt.Fprintf(&b, `package repro

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cairnkv/cairn/lsm"
	"github.com/cairnkv/cairn/lsm/vfs"
)

// Reduced from the metamorphic test, config %s.
func TestRepro(t *testing.T) {
	fs := vfs.NewMem()
	opts := &lsm.Options{FS: fs, MemTableSizeBytes: %d, BlockSizeBytes: %d, BlockRestartInterval: %d,
		L0CompactionThreshold: %d, TargetFileSizeBytes: %d, LBaseMaxBytes: %d, LevelMultiplier: %d,
		Compression: %d, FilterBitsPerKey: %v, MemtableBloomBitsPerKey: %v, CacheSizeBytes: %d,
		WALRecovery: %d, DisableWAL: %v}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// check fails unless a Get returned want (nil: not found).
	check := func(what string, v []byte, err error, want []byte) {
		t.Helper()
		switch {
		case want == nil && !errors.Is(err, lsm.ErrNotFound):
			t.Fatalf("%%s = %%q, %%v; want not found", what, v, err)
		case want != nil && (err != nil || !bytes.Equal(v, want)):
			t.Fatalf("%%s = %%q, %%v; want %%q", what, v, err, want)
		}
	}
	db, err := lsm.Open("/db", opts)
	must(err)
	defer func() { db.Close() }()
	var b *lsm.Batch
	_, _ = b, check
`, cfg.Name, o.MemTableSizeBytes, o.BlockSizeBytes, o.BlockRestartInterval, o.L0CompactionThreshold,
		o.TargetFileSizeBytes, o.LBaseMaxBytes, o.LevelMultiplier, o.Compression, o.FilterBitsPerKey,
		o.MemtableBloomBitsPerKey, o.CacheSizeBytes, o.WALRecovery, o.DisableWAL)

	m := newModel()
	snaps := make(map[int]*model)
	written := make(map[string]bool)
	var emit func(op Op)
	checkAll := func(what string) {
		keys := make([]string, 0, len(written))
		for k := range written {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "\t{ v, err := db.Get(%s); check(%q, v, err, %s) }\n", bs([]byte(k)), what+" Get("+fmt.Sprintf("%q", k)+")", want(m, []byte(k)))
		}
	}
	emit = func(op Op) {
		fmt.Fprintf(&b, "\t// %.120s\n", op)
		if w, ok := op.(writeOp); ok {
			for _, e := range w.entries() {
				written[string(e.key)] = true
			}
			m.apply(w)
		}
		switch o := op.(type) {
		case *putOp:
			fmt.Fprintf(&b, "\tmust(db.Put(%s, %s, %s))\n", bs(o.key), bs(o.value), wo(o.sync))
		case *deleteOp:
			fmt.Fprintf(&b, "\tmust(db.Delete(%s, %s))\n", bs(o.key), wo(o.sync))
		case *deleteRangeOp:
			fmt.Fprintf(&b, "\tmust(db.DeleteRange(%s, %s, %s))\n", bs(o.start), bs(o.end), wo(o.sync))
		case *batchOp:
			fmt.Fprintf(&b, "\tb = lsm.NewBatch()\n")
			for _, e := range o.ents {
				switch e.kind {
				case entrySet:
					fmt.Fprintf(&b, "\tb.Set(%s, %s)\n", bs(e.key), bs(e.value))
				case entryDelete:
					fmt.Fprintf(&b, "\tb.Delete(%s)\n", bs(e.key))
				default:
					fmt.Fprintf(&b, "\tb.DeleteRange(%s, %s)\n", bs(e.key), bs(e.end))
				}
			}
			fmt.Fprintf(&b, "\tmust(db.Write(b, %s))\n", wo(o.sync))
		case *getOp:
			if o.snap < 0 {
				fmt.Fprintf(&b, "\t{ v, err := db.Get(%s); check(%q, v, err, %s) }\n", bs(o.key), op.String(), want(m, o.key))
			} else if sm, ok := snaps[o.snap]; ok {
				fmt.Fprintf(&b, "\t{ v, err := s%d.Get(%s); check(%q, v, err, %s) }\n", o.snap, bs(o.key), op.String(), want(sm, o.key))
			}
		case *newSnapshotOp:
			snaps[o.id] = m.clone()
			fmt.Fprintf(&b, "\ts%d, err := db.NewSnapshot()\n\tmust(err)\n\tdefer s%d.Close()\n", o.id, o.id)
		case *closeSnapshotOp:
			if _, ok := snaps[o.id]; ok {
				fmt.Fprintf(&b, "\ts%d.Close()\n", o.id)
			}
		case *flushOp:
			fmt.Fprintf(&b, "\tmust(db.Flush())\n")
		case *blobGCOp:
			fmt.Fprintf(&b, "\tmust(db.BlobGC(%v))\n", o.minRatio)
		case *compactOp:
			fmt.Fprintf(&b, "\tmust(db.Compact(%s, %s))\n", bs(o.start), bs(o.end))
		case *iterOp:
			for _, s := range o.steps {
				if s.kind == stepDB {
					emit(s.op)
				}
			}
		case *reopenOp:
			for id := range snaps {
				fmt.Fprintf(&b, "\ts%d.Close()\n", id)
			}
			clear(snaps)
			fmt.Fprintf(&b, "\tmust(db.Close())\n\tdb, err = lsm.Open(\"/db\", opts)\n\tmust(err)\n")
			checkAll("after reopen:")
		case *crashOp:
			for id := range snaps {
				fmt.Fprintf(&b, "\ts%d.Close()\n", id)
			}
			clear(snaps)
			fmt.Fprintf(&b, "\t{\n\t\tcrashed := fs.CrashClone()\n\t\tmust(db.Close())\n\t\topts.FS = crashed\n\t\tfs = crashed\n\t\tdb, err = lsm.Open(\"/db\", opts)\n\t\tmust(err)\n\t}\n")
			fmt.Fprintf(&b, "\t// (expectations assume every write was synced)\n")
			checkAll("after crash:")
		default:
			fmt.Fprintf(&b, "\t// (not rendered)\n")
		}
	}
	for _, op := range ops {
		emit(op)
	}
	fmt.Fprintf(&b, "\t// final state\n")
	checkAll("final state:")
	fmt.Fprintf(&b, "}\n")
	return b.String()
}
