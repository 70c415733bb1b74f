package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/hashicorp/raft"
)

// TestScanAgainstModel pages through random ranges, prefixes and directions
// and compares with a sorted list of the keys.
func TestScanAgainstModel(t *testing.T) {
	rng := newRand(testSeed(t))
	f, g := newTest(t), newLogGen()
	var keys []string
	var logs []*raft.Log
	for range 300 {
		k := fmt.Sprintf("%c%d", 'a'+rng.IntN(5), rng.IntN(100))
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
		logs = append(logs, g.cmd(t, put(k, "v-"+k)))
	}
	keys = append(keys, "\xff\xff") // the last possible prefix
	logs = append(logs, g.cmd(t, put("\xff\xff", "v")))
	f.ApplyBatch(logs)
	slices.Sort(keys)

	randKey := func() []byte {
		if rng.IntN(8) == 0 {
			return nil
		}
		return fmt.Appendf(nil, "%c%d", 'a'+rng.IntN(6), rng.IntN(120))
	}
	for range 300 {
		req := &cairnpb.ScanRequest{Limit: uint32(rng.IntN(20)), Reverse: rng.IntN(2) == 0, KeysOnly: rng.IntN(3) == 0}
		var want []string
		if rng.IntN(3) == 0 {
			req.Prefix = randKey()
			if rng.IntN(10) == 0 {
				req.Prefix = []byte{0xff}
			}
			for _, k := range keys {
				if bytes.HasPrefix([]byte(k), req.Prefix) {
					want = append(want, k)
				}
			}
		} else {
			req.Start, req.End = randKey(), randKey()
			if req.End != nil && bytes.Compare(req.Start, req.End) > 0 {
				req.Start, req.End = req.End, req.Start
			}
			for _, k := range keys {
				if k >= string(req.Start) && (req.End == nil || k < string(req.End)) {
					want = append(want, k)
				}
			}
		}
		if req.Reverse {
			slices.Reverse(want)
		}
		var got []string
		for pages := 0; ; pages++ {
			resp, err := f.Scan(req)
			if err != nil {
				t.Fatalf("Scan(%v): %v", req, err)
			}
			limit := int(req.Limit)
			if limit == 0 {
				limit = cairnpb.DefaultScanLimit
			}
			if len(resp.Kvs) > limit {
				t.Fatalf("page of %d keys, limit %d", len(resp.Kvs), limit)
			}
			for _, kv := range resp.Kvs {
				got = append(got, string(kv.Key))
				if req.KeysOnly != (kv.Value == nil) || (!req.KeysOnly && string(kv.Value) != "v-"+string(kv.Key) && string(kv.Key) != "\xff\xff") {
					t.Fatalf("key %q value %q (keys only %v)", kv.Key, kv.Value, req.KeysOnly)
				}
			}
			if len(resp.NextPageToken) == 0 {
				break
			}
			if pages > len(keys) {
				t.Fatal("scan does not terminate")
			}
			req.PageToken = resp.NextPageToken
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Scan(%v) = %q, want %q", req, got, want)
		}
	}
}

func TestScanPageBytesAndErrors(t *testing.T) {
	f, g := newTest(t), newLogGen()
	var logs []*raft.Log
	for i := range 10 {
		logs = append(logs, g.cmd(t, put(fmt.Sprintf("k%d", i), string(make([]byte, 100)))))
	}
	f.ApplyBatch(logs)
	kvs, more, err := f.scan(nil, nil, 100, 250, false, true)
	if err != nil || len(kvs) != 3 || !more {
		t.Fatalf("byte-bounded page: %d keys, more %v, %v", len(kvs), more, err)
	}
	kvs, more, err = f.scan(nil, nil, 100, 1, true, true)
	if err != nil || len(kvs) != 1 || !more || string(kvs[0].Key) != "k9" {
		t.Fatalf("tiny byte bound: %v, more %v, %v", kvs, more, err)
	}

	resp, err := f.Scan(&cairnpb.ScanRequest{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []*cairnpb.ScanRequest{
		{Start: []byte("b"), End: []byte("a")},
		{Prefix: []byte("k"), End: []byte("z")},
		{PageToken: []byte("junk")},
		{PageToken: resp.NextPageToken, Reverse: true}, // token of the other direction
		{Start: make([]byte, maxUserKeySize+1)},
	} {
		if _, err := f.Scan(req); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Scan(%v): %v, want invalid argument", req, err)
		}
	}
	if _, err := f.Get(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Get(empty): %v", err)
	}
}

func FuzzDecodeRecords(f *testing.F) {
	f.Add(encodeRecord(nil, &record{version: 3, createIndex: 5, modIndex: 9, value: []byte("v")}))
	f.Add((&sessionRecord{seq: 2, lastIndex: 7, lastActive: -5, retained: true, result: []byte{1, 2}}).encode())
	f.Add(appliedState{index: 1, term: 2, clock: 3}.encode())
	f.Add(encodePageToken([]byte("key"), true))
	f.Add([]byte{1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := decodeRecord(b); err == nil {
			if r.version == 0 || r.createIndex == 0 || r.modIndex < r.createIndex {
				t.Fatalf("accepted impossible metadata %+v", r)
			}
			if r2, err := decodeRecord(encodeRecord(nil, &r)); err != nil || r2.version != r.version ||
				r2.modIndex != r.modIndex || !bytes.Equal(r2.value, r.value) {
				t.Fatalf("record does not round-trip: %+v, %v", r2, err)
			}
		} else if !IsCorruption(err) {
			t.Fatalf("record error %v is not corruption", err)
		}
		if r, err := decodeSessionRecord(b); err == nil {
			if r.seq == 0 || r.lastIndex == 0 {
				t.Fatal("accepted an impossible session")
			}
		} else if !IsCorruption(err) {
			t.Fatalf("session error %v is not corruption", err)
		}
		if st, err := decodeAppliedState(b); err == nil {
			if !bytes.Equal(st.encode(), b) {
				t.Fatal("applied state does not round-trip")
			}
		}
		for _, rev := range []bool{false, true} {
			if k, err := decodePageToken(b, rev); err == nil && len(k) == 0 {
				t.Fatal("empty resume key accepted")
			}
		}
	})
}
