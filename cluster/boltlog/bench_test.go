package boltlog

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// BenchmarkStoreLogs appends batches of 8 entries of 64 KiB (bench/logtrim's
// load) to this store and to raft-boltdb with the same bbolt options, with
// and without a log compaction pending (boltlog then deletes a slice of the
// log's head in every append; raft-boltdb's DeleteRange is not timed).
func BenchmarkStoreLogs(b *testing.B) {
	open := map[string]func(string) raft.LogStore{
		"boltlog": func(path string) raft.LogStore {
			s, err := Open(path, testOptions())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
		"raftboltdb": func(path string) raft.LogStore {
			s, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: testOptions().Bolt})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
	}
	for _, name := range []string{"boltlog", "raftboltdb"} {
		for _, trim := range []bool{false, true} {
			b.Run(name+map[bool]string{false: "/append", true: "/append-during-trim"}[trim], func(b *testing.B) {
				s := open[name](filepath.Join(b.TempDir(), "raft.db"))
				data := make([]byte, 64<<10)
				next := uint64(1)
				batch := func() []*raft.Log {
					logs := make([]*raft.Log, 8)
					for i := range logs {
						logs[i] = &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: data}
						next++
					}
					return logs
				}
				if trim { // a log to trim while appending
					for range 4 * b.N {
						if err := s.StoreLogs(batch()); err != nil {
							b.Fatal(err)
						}
					}
					if err := s.DeleteRange(1, next-2); err != nil {
						b.Fatal(err)
					}
				}
				b.SetBytes(8 << 16)
				b.ResetTimer()
				for range b.N {
					if err := s.StoreLogs(batch()); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
