package boltlog

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// compatLogs are entries of every field raft sets, with and without a
// time (raft-boltdb's default encoding writes time.Time in go-msgpack's
// old binary form).
func compatLogs(from, to uint64) []*raft.Log {
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		l := entry(i, i/10+1, int(i%7)*100)
		l.Type = []raft.LogType{raft.LogCommand, raft.LogNoop, raft.LogConfiguration, raft.LogBarrier}[i%4]
		switch i % 3 {
		case 0:
			l.AppendedAt = time.Time{}
		case 1:
			l.AppendedAt = time.Date(2026, 12, 2, 5, 0, 0, int(i), time.UTC)
		}
		if i%5 == 0 {
			l.Data, l.Extensions = nil, nil
		}
		logs = append(logs, l)
	}
	return logs
}

// stableKeys are raft's own stable store keys with values.
var stableKeys = map[string][]byte{"CurrentTerm": indexKey(42), "LastVoteTerm": indexKey(41), "LastVoteCand": []byte("n2")}

// TestReadsRaftBoltDB: a file written by raft-boltdb/v2 (as cairn opened
// it before this package, and with its new time format) opens unchanged:
// every entry and stable key reads back as written, and this store
// encodes an entry to the very bytes raft-boltdb stored.
func TestReadsRaftBoltDB(t *testing.T) {
	for _, newTime := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "raft.db")
		rb, err := raftboltdb.New(raftboltdb.Options{Path: path, MsgpackUseNewTimeFormat: newTime,
			BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType}})
		if err != nil {
			t.Fatal(err)
		}
		logs := compatLogs(1, 200)
		if err := rb.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		if err := rb.DeleteRange(1, 20); err != nil {
			t.Fatal(err)
		}
		for k, v := range stableKeys {
			if err := rb.Set([]byte(k), v); err != nil {
				t.Fatal(err)
			}
		}
		rb.Close()

		s := openTest(t, path)
		checkStore(t, s, logs[20:], 21, 200)
		if !newTime { // byte for byte
			err := s.db.View(func(tx *bbolt.Tx) error {
				for _, l := range logs[20:] {
					want, err := encodeLog(l)
					if err != nil {
						return err
					}
					if got := tx.Bucket(logsBucket).Get(indexKey(l.Index)); !bytes.Equal(got, want) {
						t.Errorf("entry %d: raft-boltdb stored %x, this store encodes %x", l.Index, got, want)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		// And it keeps working on that file: append, trim, reopen.
		if err := s.StoreLogs(compatLogs(201, 210)); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteRange(21, 100); err != nil {
			t.Fatal(err)
		}
		if err := s.StoreLogs(compatLogs(211, 211)); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
}

// TestRaftBoltDBReads: a file this store wrote, with trims done inside
// appends and a suffix truncated, opens with raft-boltdb/v2 and reads
// back the same entries and stable keys: a node can go back.
func TestRaftBoltDBReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	s := openTest(t, path)
	s.trimEntries = 5
	s.trimIdle = time.Hour // trims only inside appends
	logs := compatLogs(1, 300)
	if err := s.StoreLogs(logs[:100]); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 60); err != nil { // prefix: pending
		t.Fatal(err)
	}
	for _, l := range logs[100:250] { // each append trims some
		if err := s.StoreLogs([]*raft.Log{l}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteRange(241, 250); err != nil { // a conflicting suffix
		t.Fatal(err)
	}
	if err := s.StoreLogs(logs[240:300]); err != nil {
		t.Fatal(err)
	}
	for k, v := range stableKeys {
		if err := s.Set([]byte(k), v); err != nil {
			t.Fatal(err)
		}
	}
	checkStore(t, s, logs[60:], 61, 300)
	s.Close()

	rb, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	checkStore(t, rb, logs[60:], 61, 300)
}

// checkStore checks that s (this store or raft-boltdb) holds exactly
// want as the log [first, last] and the stable keys.
func checkStore(t *testing.T, s interface {
	raft.LogStore
	raft.StableStore
}, want []*raft.Log, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if f != first || l != last {
		t.Fatalf("log [%d, %d], want [%d, %d]", f, l, first, last)
	}
	var got raft.Log
	for _, w := range want {
		if err := s.GetLog(w.Index, &got); err != nil || !sameLog(&got, w) {
			t.Fatalf("entry %d: %+v, %v; want %+v", w.Index, got, err, w)
		}
	}
	if err := s.GetLog(first-1, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("entry %d below the log: %v", first-1, err)
	}
	for k, v := range stableKeys {
		if got, err := s.Get([]byte(k)); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("stable key %s: %q, %v", k, got, err)
		}
	}
	if got, err := s.GetUint64([]byte("CurrentTerm")); err != nil || got != 42 {
		t.Fatalf("CurrentTerm: %d, %v", got, err)
	}
	if _, err := s.Get([]byte("missing")); err == nil || err.Error() != "not found" {
		t.Fatalf("a missing key: %v, want raft-boltdb's \"not found\" (raft matches its text)", err)
	}
}
