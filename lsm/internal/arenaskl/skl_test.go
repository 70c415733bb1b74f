package arenaskl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cairnkv/cairn/lsm/internal/base"
)

var seedFlag = flag.Uint64("seed", 0, "seed for randomized tests (0: time-based)")

func testSeed(t testing.TB) uint64 {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	return seed
}

func ikey(ukey string, seq base.SeqNum, kind base.Kind) []byte {
	return base.MakeInternalKey(nil, []byte(ukey), seq, kind)
}

func newList(capacity int) *Skiplist {
	s := NewSkiplist(NewArena(capacity))
	s.testing = true
	return s
}

// model is the dumb reference: a slice kept sorted by InternalCompare.
type model struct {
	keys   [][]byte
	values [][]byte
}

func (m *model) search(key []byte) (int, bool) {
	return slices.BinarySearchFunc(m.keys, key, base.InternalCompare)
}

func (m *model) add(key, value []byte) error {
	i, found := m.search(key)
	if found {
		return ErrRecordExists
	}
	m.keys = slices.Insert(m.keys, i, slices.Clone(key))
	m.values = slices.Insert(m.values, i, slices.Clone(value))
	return nil
}

// seekGE returns the index of the first key >= key (len(keys) if none).
func (m *model) seekGE(key []byte) int { i, _ := m.search(key); return i }

// seekLT returns the index of the last key < key (-1 if none).
func (m *model) seekLT(key []byte) int { return m.seekGE(key) - 1 }

// checkPos asserts that it is positioned where the model's index i is.
func checkPos(t *testing.T, it *Iterator, m *model, i int, op string) {
	t.Helper()
	if i < 0 || i >= len(m.keys) {
		if it.Valid() {
			t.Fatalf("%s: iterator at %s, model exhausted", op, base.FormatInternalKey(it.Key()))
		}
		return
	}
	if !it.Valid() {
		t.Fatalf("%s: iterator exhausted, model at %s", op, base.FormatInternalKey(m.keys[i]))
	}
	if !bytes.Equal(it.Key(), m.keys[i]) || !bytes.Equal(it.Value(), m.values[i]) {
		t.Fatalf("%s: iterator at %s=%q, model at %s=%q", op,
			base.FormatInternalKey(it.Key()), it.Value(), base.FormatInternalKey(m.keys[i]), m.values[i])
	}
}

// checkInvariants verifies the whole structure of a quiescent list: every
// level is sorted, its prev links mirror its next links, each level is a
// subset of the one below, levels at or above Height are empty, and Count
// matches level 0.
func checkInvariants(t *testing.T, s *Skiplist) {
	t.Helper()
	var below map[*node]bool
	for level := 0; level < maxHeight; level++ {
		here := map[*node]bool{}
		prev := s.head
		for nd := s.node(s.head.next(level)); nd != s.tail; nd = s.node(nd.next(level)) {
			if nd == nil {
				t.Fatalf("level %d: nil link", level)
			}
			if s.node(nd.prev(level)) != prev {
				t.Fatalf("level %d: prev link of %s is not its predecessor", level, base.FormatInternalKey(s.key(nd)))
			}
			if prev != s.head && base.InternalCompare(s.key(prev), s.key(nd)) >= 0 {
				t.Fatalf("level %d: %s before %s", level,
					base.FormatInternalKey(s.key(prev)), base.FormatInternalKey(s.key(nd)))
			}
			if below != nil && !below[nd] {
				t.Fatalf("level %d: node %s missing from level %d", level, base.FormatInternalKey(s.key(nd)), level-1)
			}
			here[nd] = true
			prev = nd
		}
		if s.node(s.tail.prev(level)) != prev {
			t.Fatalf("level %d: tail prev link is not the last node", level)
		}
		if level == 0 && uint64(len(here)) != s.Count() {
			t.Fatalf("level 0 has %d nodes, Count() = %d", len(here), s.Count())
		}
		if level >= int(s.Height()) && len(here) != 0 {
			t.Fatalf("level %d not empty but Height() = %d", level, s.Height())
		}
		below = here
	}
}

func TestEmpty(t *testing.T) {
	s := newList(1 << 10)
	if s.Count() != 0 || s.Height() != 1 {
		t.Fatalf("Count %d Height %d", s.Count(), s.Height())
	}
	if _, _, ok := s.Get(ikey("a", 1, base.KindSet)); ok {
		t.Fatal("Get on empty list found something")
	}
	var it Iterator
	it.Init(s)
	if it.Valid() {
		t.Fatal("fresh iterator valid")
	}
	for name, op := range map[string]func(){
		"First":  it.First,
		"Last":   it.Last,
		"SeekGE": func() { it.SeekGE(ikey("a", 1, base.KindSet)) },
		"SeekLT": func() { it.SeekLT(ikey("a", 1, base.KindSet)) },
	} {
		op()
		if it.Valid() || it.Key() != nil || it.Value() != nil {
			t.Fatalf("%s on empty list: valid", name)
		}
		it.Next()
		it.Prev()
		if it.Valid() {
			t.Fatalf("%s then Next/Prev on empty list: valid", name)
		}
	}
	if err := it.Close(); err != nil || it.Valid() {
		t.Fatalf("Close: %v, valid %v", err, it.Valid())
	}
	checkInvariants(t, s)
}

func TestDuplicate(t *testing.T) {
	s := newList(1 << 16)
	mustAdd := func(k []byte, want error) {
		t.Helper()
		if err := s.Add(k, []byte("v")); !errors.Is(err, want) {
			t.Fatalf("Add(%s) = %v, want %v", base.FormatInternalKey(k), err, want)
		}
	}
	mustAdd(ikey("a", 5, base.KindSet), nil)
	mustAdd(ikey("a", 5, base.KindSet), ErrRecordExists)
	mustAdd(ikey("a", 5, base.KindDelete), nil) // different trailer
	mustAdd(ikey("a", 6, base.KindSet), nil)
	mustAdd(ikey("b", 5, base.KindSet), nil)
	mustAdd(ikey("a", 6, base.KindSet), ErrRecordExists)
	if s.Count() != 4 {
		t.Fatalf("Count = %d, want 4", s.Count())
	}
	// A duplicate value stays the first one added.
	if err := s.Add(ikey("c", 1, base.KindSet), []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ikey("c", 1, base.KindSet), []byte("second")); !errors.Is(err, ErrRecordExists) {
		t.Fatal(err)
	}
	if _, v, _ := s.Get(ikey("c", 1, base.KindSet)); string(v) != "first" {
		t.Fatalf("value %q, want first", v)
	}
	checkInvariants(t, s)
}

func TestInvalidKey(t *testing.T) {
	s := newList(1 << 12)
	for _, k := range [][]byte{nil, {}, []byte("1234567")} {
		if err := s.Add(k, nil); !errors.Is(err, base.ErrInvalidArgument) {
			t.Fatalf("Add(%q) = %v, want ErrInvalidArgument", k, err)
		}
	}
	if s.Count() != 0 {
		t.Fatal("invalid key added")
	}
	// Short search keys sort before every valid key (InternalCompare).
	if err := s.Add(ikey("", 0, base.KindDelete), nil); err != nil {
		t.Fatal(err)
	}
	var it Iterator
	it.Init(s)
	it.SeekGE([]byte("zz"))
	if !it.Valid() {
		t.Fatal("SeekGE(short) should land on the first entry")
	}
	it.SeekLT([]byte("zz"))
	if it.Valid() {
		t.Fatal("SeekLT(short) should be exhausted")
	}
}

func TestArenaFull(t *testing.T) {
	s := newList(int(MinArenaSize) + 4<<10)
	var m model
	var i int
	for ; ; i++ {
		k := ikey(fmt.Sprintf("key%05d", i), base.SeqNum(i), base.KindSet)
		v := bytes.Repeat([]byte{byte(i)}, i%50)
		err := s.Add(k, v)
		if errors.Is(err, ErrArenaFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		_ = m.add(k, v)
	}
	if i == 0 {
		t.Fatal("nothing fit")
	}
	if s.Size() > s.Arena().Capacity() {
		t.Fatalf("Size %d > Capacity %d", s.Size(), s.Arena().Capacity())
	}
	// Once full, even a tiny entry fails, and the list is unchanged.
	if err := s.Add(ikey("", 0, base.KindSet), nil); !errors.Is(err, ErrArenaFull) {
		t.Fatalf("Add after full = %v", err)
	}
	if s.Count() != uint64(len(m.keys)) {
		t.Fatalf("Count %d, want %d", s.Count(), len(m.keys))
	}
	var it Iterator
	it.Init(s)
	j := 0
	for it.First(); it.Valid(); it.Next() {
		checkPos(t, &it, &m, j, "scan")
		j++
	}
	if j != len(m.keys) {
		t.Fatalf("scanned %d, want %d", j, len(m.keys))
	}
	checkInvariants(t, s)

	// An entry larger than the whole arena fails cleanly on a fresh list.
	s2 := newList(1 << 12)
	if err := s2.Add(ikey("k", 1, base.KindSet), make([]byte, 1<<12)); !errors.Is(err, ErrArenaFull) {
		t.Fatalf("oversized Add = %v", err)
	}
	if MaxNodeSize(9, 1<<12) <= 1<<12 {
		t.Fatal("MaxNodeSize too small")
	}
}

func TestMinArenaSize(t *testing.T) {
	s := NewSkiplist(NewArena(int(MinArenaSize)))
	if err := s.Add(ikey("a", 1, base.KindSet), nil); !errors.Is(err, ErrArenaFull) {
		t.Fatalf("Add on minimal arena = %v", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic for an arena below MinArenaSize")
			}
		}()
		NewSkiplist(NewArena(int(MinArenaSize) - 1))
	}()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic for an arena already in use")
			}
		}()
		NewSkiplist(s.Arena())
	}()
}

// TestMaxNodeSizeBound checks that an entry always fits in MaxNodeSize bytes
// of fresh arena, whatever its height.
func TestMaxNodeSizeBound(t *testing.T) {
	k := ikey("key", 1, base.KindSet)
	v := []byte("value")
	for h := uint32(1); h <= maxHeight; h++ {
		for pad := 0; pad < nodeAlignment; pad++ {
			a := NewArena(int(MinArenaSize) + pad + int(MaxNodeSize(uint32(len(k)), uint32(len(v)))))
			NewSkiplist(a)
			a.n.Add(uint64(pad))
			if _, err := newNode(a, h, k, v); err != nil {
				t.Fatalf("height %d pad %d: %v", h, pad, err)
			}
		}
	}
}

func TestKeyValueCapacity(t *testing.T) {
	s := newList(1 << 12)
	if err := s.Add(ikey("a", 1, base.KindSet), []byte("vvvv")); err != nil {
		t.Fatal(err)
	}
	k, v, ok := s.Get(ikey("a", 2, base.KindSet))
	if !ok {
		t.Fatal("not found")
	}
	_ = append(k, 'X') // must reallocate, not overwrite the value
	if string(v) != "vvvv" {
		t.Fatalf("value clobbered: %q", v)
	}
	if cap(v) != len(v) {
		t.Fatalf("value capacity %d, len %d", cap(v), len(v))
	}
}

func TestRandomHeight(t *testing.T) {
	const n = 1 << 16
	var counts [maxHeight + 1]int
	for range n {
		h := randomHeight()
		if h < 1 || h > maxHeight {
			t.Fatalf("height %d", h)
		}
		counts[h]++
	}
	// P(h >= 2) = 1/4, P(h >= 3) = 1/16: expect 16384 and 4096, with
	// standard deviations near 110 and 62.
	ge2 := n - counts[1]
	ge3 := ge2 - counts[2]
	if ge2 < 15000 || ge2 > 17800 || ge3 < 3500 || ge3 > 4700 {
		t.Fatalf("height distribution off: >=2: %d, >=3: %d of %d", ge2, ge3, n)
	}
}

// TestRandomVsModel adds random entries and checks every read operation
// against a sorted slice, between batches of adds.
func TestRandomVsModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 0))
	for round := range 20 {
		keySpace := 1 + rng.IntN(200)
		runModelRound(t, rng, keySpace, 200+rng.IntN(1000), fmt.Sprintf("round %d", round))
	}
}

func randomUserKey(rng *rand.Rand, keySpace int) []byte {
	// Varying lengths exercise prefix ordering ("k1" < "k1\x00" < "k10").
	k := fmt.Appendf(nil, "k%d", rng.IntN(keySpace))
	if rng.IntN(8) == 0 {
		k = append(k, 0)
	}
	return k
}

func randomIKey(rng *rand.Rand, keySpace int) []byte {
	return base.MakeInternalKey(nil, randomUserKey(rng, keySpace), base.SeqNum(rng.IntN(20)), base.Kind(rng.IntN(int(base.KindMax)+1)))
}

func runModelRound(t *testing.T, rng *rand.Rand, keySpace, adds int, name string) {
	s := newList(1 << 20)
	var m model
	var it Iterator
	it.Init(s)
	for added := 0; added < adds; {
		batch := 1 + rng.IntN(100)
		for range batch {
			k := randomIKey(rng, keySpace)
			v := fmt.Appendf(nil, "v%d", rng.IntN(1000))
			want := m.add(k, v)
			if got := s.Add(k, v); !errors.Is(got, want) {
				t.Fatalf("%s: Add(%s) = %v, model %v", name, base.FormatInternalKey(k), got, want)
			}
			added++
		}
		if s.Count() != uint64(len(m.keys)) {
			t.Fatalf("%s: Count %d, model %d", name, s.Count(), len(m.keys))
		}
		// Full scans both ways.
		i := 0
		for it.First(); it.Valid(); it.Next() {
			checkPos(t, &it, &m, i, name+": forward scan")
			i++
		}
		checkPos(t, &it, &m, i, name+": end of forward scan")
		i = len(m.keys) - 1
		for it.Last(); it.Valid(); it.Prev() {
			checkPos(t, &it, &m, i, name+": backward scan")
			i--
		}
		checkPos(t, &it, &m, i, name+": end of backward scan")

		// Random seeks followed by random steps.
		for range 50 {
			var pos int
			var op string
			sk := randomIKey(rng, keySpace+2)
			if rng.IntN(10) == 0 {
				sk = sk[:rng.IntN(len(sk))] // short keys are legal search keys
			}
			switch rng.IntN(4) {
			case 0:
				it.SeekGE(sk)
				pos, op = m.seekGE(sk), "SeekGE"
				k, v, ok := s.Get(sk)
				if ok != (pos < len(m.keys)) || ok && (!bytes.Equal(k, m.keys[pos]) || !bytes.Equal(v, m.values[pos])) {
					t.Fatalf("%s: Get(%q) = %q, %q, %v", name, sk, k, v, ok)
				}
			case 1:
				it.SeekLT(sk)
				pos, op = m.seekLT(sk), "SeekLT"
			case 2:
				it.First()
				pos, op = 0, "First"
			case 3:
				it.Last()
				pos, op = len(m.keys)-1, "Last"
			}
			op = fmt.Sprintf("%s: %s(%q)", name, op, sk)
			checkPos(t, &it, &m, pos, op)
			for range rng.IntN(10) {
				if !it.Valid() {
					break
				}
				if rng.IntN(2) == 0 {
					it.Next()
					pos++
					op += ".Next"
				} else {
					it.Prev()
					pos--
					op += ".Prev"
				}
				checkPos(t, &it, &m, pos, op)
			}
		}
	}
	checkInvariants(t, s)
}

// TestConcurrent runs 8 writers and 4 readers at once. Writers add disjoint
// keys plus a shared set of contended keys; readers check order and
// visibility while it happens. At the end the list must hold exactly the
// expected keys in order with consistent links.
func TestConcurrent(t *testing.T) {
	const writers = 8
	const readers = 4
	perWriter := 2000
	if testing.Short() {
		perWriter = 500
	}
	const contended = 200

	s := newList(64 << 20)
	rng := rand.New(rand.NewPCG(testSeed(t), 1))

	// Each writer's keys, in a random order. Keys of different writers
	// interleave in key order, so writers race for the same splices.
	keys := make([][][]byte, writers)
	for w := range keys {
		for i := range perWriter {
			keys[w] = append(keys[w], ikey(fmt.Sprintf("k%06d", i*writers+w), base.SeqNum(i), base.KindSet))
		}
		rng.Shuffle(len(keys[w]), func(i, j int) { keys[w][i], keys[w][j] = keys[w][j], keys[w][i] })
	}
	shared := make([][]byte, contended)
	for i := range shared {
		shared[i] = ikey(fmt.Sprintf("k%06d", i*writers), 1<<40, base.KindDelete)
	}

	var (
		wg, rwg    sync.WaitGroup
		done       atomic.Bool
		sharedWins [contended]atomic.Int32
		failed     atomic.Bool
		errc       = make(chan error, writers+readers)
	)
	// published[w] is how many of writer w's keys are known added.
	var published [writers]atomic.Int64
	for w := range writers {
		wg.Go(func() {
			for i, k := range keys[w] {
				if err := s.Add(k, k); err != nil {
					errc <- fmt.Errorf("writer %d: Add: %w", w, err)
					failed.Store(true)
					return
				}
				published[w].Store(int64(i + 1))
				if i < contended {
					j := (i + w) % contended
					switch err := s.Add(shared[j], []byte{byte(w)}); {
					case err == nil:
						sharedWins[j].Add(1)
					case errors.Is(err, ErrRecordExists):
					default:
						errc <- fmt.Errorf("writer %d: Add shared: %w", w, err)
						failed.Store(true)
						return
					}
				}
			}
		})
	}
	for r := range readers {
		rwg.Go(func() {
			rrng := rand.New(rand.NewPCG(uint64(r), 2))
			var it Iterator
			it.Init(s)
			for !done.Load() && !failed.Load() {
				// Writers yield inside Add (s.testing); without yielding
				// here too they would wait a full time slice per reader.
				runtime.Gosched()
				// Everything a writer published must be found.
				w := rrng.IntN(writers)
				if n := published[w].Load(); n > 0 {
					k := keys[w][rrng.IntN(int(n))]
					got, v, ok := s.Get(k)
					if !ok || !bytes.Equal(got, k) || !bytes.Equal(v, k) {
						errc <- fmt.Errorf("reader %d: published key %s not found", r, base.FormatInternalKey(k))
						failed.Store(true)
						return
					}
				}
				// Scans are strictly ordered both ways. Scans are short
				// windows from a random point, so that readers do not starve
				// the writers on a small machine.
				start := ikey(fmt.Sprintf("k%06d", rrng.IntN(perWriter*writers)), 0, base.KindSet)
				var prev []byte
				n := 0
				for it.SeekGE(start); it.Valid() && n < 200; it.Next() {
					if prev != nil && base.InternalCompare(prev, it.Key()) >= 0 {
						errc <- fmt.Errorf("reader %d: forward order broken", r)
						failed.Store(true)
						return
					}
					prev = it.Key()
					n++
				}
				prev, n = nil, 0
				for it.SeekLT(start); it.Valid() && n < 200; it.Prev() {
					if prev != nil && base.InternalCompare(prev, it.Key()) <= 0 {
						errc <- fmt.Errorf("reader %d: backward order broken", r)
						failed.Store(true)
						return
					}
					prev = it.Key()
					n++
				}
				// A seek lands on the boundary.
				sk := ikey(fmt.Sprintf("k%06d", rrng.IntN(perWriter*writers)), base.SeqNum(rrng.IntN(perWriter)), base.KindSet)
				it.SeekGE(sk)
				if it.Valid() && base.InternalCompare(it.Key(), sk) < 0 {
					errc <- fmt.Errorf("reader %d: SeekGE landed before its key", r)
					failed.Store(true)
					return
				}
				it.SeekLT(sk)
				if it.Valid() && base.InternalCompare(it.Key(), sk) >= 0 {
					errc <- fmt.Errorf("reader %d: SeekLT landed at or after its key", r)
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	done.Store(true)
	rwg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}

	for j := range sharedWins {
		if n := sharedWins[j].Load(); n != 1 {
			t.Fatalf("contended key %d added %d times", j, n)
		}
	}
	var m model
	for w := range keys {
		m.keys = append(m.keys, keys[w]...)
	}
	m.keys = append(m.keys, shared...)
	slices.SortFunc(m.keys, base.InternalCompare)
	if s.Count() != uint64(len(m.keys)) {
		t.Fatalf("Count %d, want %d", s.Count(), len(m.keys))
	}
	var it Iterator
	it.Init(s)
	i := 0
	for it.First(); it.Valid(); it.Next() {
		if !bytes.Equal(it.Key(), m.keys[i]) {
			t.Fatalf("entry %d: %s, want %s", i, base.FormatInternalKey(it.Key()), base.FormatInternalKey(m.keys[i]))
		}
		i++
	}
	if i != len(m.keys) {
		t.Fatalf("scanned %d entries, want %d", i, len(m.keys))
	}
	checkInvariants(t, s)
}

// TestConcurrentSameSplice makes every writer insert into the same gap at
// once, the worst case for the CAS retry and prev-link helping paths.
func TestConcurrentSameSplice(t *testing.T) {
	for iter := range 20 {
		s := newList(1 << 20)
		for _, k := range []string{"a", "z"} {
			if err := s.Add(ikey(k, 1, base.KindSet), nil); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range 8 {
			wg.Go(func() {
				<-start
				for i := range 50 {
					// Descending sequence numbers: each key lands right after
					// the previous one added by this writer or another.
					k := ikey("m", base.SeqNum(1000-i*8-w), base.KindSet)
					if err := s.Add(k, nil); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if s.Count() != 2+8*50 {
			t.Fatalf("iteration %d: Count %d", iter, s.Count())
		}
		checkInvariants(t, s)
	}
}

func TestGetDoesNotAllocate(t *testing.T) {
	s := newList(1 << 20)
	for i := range 1000 {
		if err := s.Add(ikey(fmt.Sprintf("k%04d", i), 1, base.KindSet), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	hit := base.MakeSearchKey(nil, []byte("k0500"), 10)
	miss := base.MakeSearchKey(nil, []byte("k0500x"), 10)
	var sink int
	if n := testing.AllocsPerRun(100, func() {
		_, v, _ := s.Get(hit)
		_, v2, _ := s.Get(miss)
		sink += len(v) + len(v2)
	}); n != 0 {
		t.Fatalf("Get allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		var it Iterator
		it.Init(s)
		it.SeekGE(hit)
		it.Next()
		it.Prev()
		it.SeekLT(miss)
		sink += len(it.Key())
	}); n != 0 {
		t.Fatalf("stack Iterator allocates %v times", n)
	}
	_ = sink
}

// TestNodeLayout pins the assumptions the unsafe code depends on.
func TestNodeLayout(t *testing.T) {
	if unsafe.Alignof(node{}) > nodeAlignment {
		t.Fatalf("node alignment %d > %d", unsafe.Alignof(node{}), nodeAlignment)
	}
	if linksSize != 8 || maxNodeSize != 12+8*maxHeight {
		t.Fatalf("links %d bytes, node %d bytes", linksSize, maxNodeSize)
	}
	a := NewArena(1 << 10)
	if uintptr(unsafe.Pointer(unsafe.SliceData(a.buf)))%nodeAlignment != 0 {
		t.Fatal("arena buffer misaligned")
	}
}

// FuzzSkiplist interprets the input as a sequence of operations on a list and
// on the model, and compares them.
func FuzzSkiplist(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 1, 2, 1, 3, 4, 2, 5, 6, 3, 0, 0, 4, 1, 1})
	f.Add([]byte("\x00a\x01\x00b\x02\x00a\x01\x01a\x05\x02c\x00\x05\x06\x05\x07"))
	f.Add(bytes.Repeat([]byte{0, 7, 3, 6, 1}, 40))
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := newList(1 << 16)
		var m model
		var it Iterator
		it.Init(s)
		pos := -1
		next := func() byte {
			if len(ops) == 0 {
				return 0
			}
			b := ops[0]
			ops = ops[1:]
			return b
		}
		key := func() []byte {
			return ikey(string([]byte{'a' + next()%8}), base.SeqNum(next()%8), base.Kind(next()%4))
		}
		for len(ops) > 0 {
			switch op := next() % 8; op {
			case 0:
				k := key()
				v := []byte{next()}
				want := m.add(k, v)
				if got := s.Add(k, v); !errors.Is(got, want) {
					if errors.Is(got, ErrArenaFull) {
						return
					}
					t.Fatalf("Add(%s) = %v, want %v", base.FormatInternalKey(k), got, want)
				}
				pos = -1
				it.Close()
				continue
			case 1:
				k := key()
				it.SeekGE(k)
				pos = m.seekGE(k)
			case 2:
				k := key()
				it.SeekLT(k)
				pos = m.seekLT(k)
			case 3:
				it.First()
				pos = 0
			case 4:
				it.Last()
				pos = len(m.keys) - 1
			case 5, 6:
				if pos < 0 || pos >= len(m.keys) {
					continue
				}
				if op == 5 {
					it.Next()
					pos++
				} else {
					it.Prev()
					pos--
				}
			case 7:
				k := key()
				got, _, ok := s.Get(k)
				i := m.seekGE(k)
				if ok != (i < len(m.keys)) || ok && !bytes.Equal(got, m.keys[i]) {
					t.Fatalf("Get(%s) = %q, %v", base.FormatInternalKey(k), got, ok)
				}
				continue
			}
			checkPos(t, &it, &m, pos, fmt.Sprintf("op with %d bytes left", len(ops)))
		}
		checkInvariants(t, s)
	})
}

func BenchmarkSkiplistInsert(b *testing.B) {
	const arenaSize = 64 << 20
	value := make([]byte, 100)
	for _, order := range []string{"sequential", "random"} {
		b.Run(order, func(b *testing.B) {
			b.ReportAllocs()
			rng := rand.New(rand.NewPCG(1, 2))
			s := NewSkiplist(NewArena(arenaSize))
			key := make([]byte, 0, 16+base.TrailerLen)
			var ukey [16]byte
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if order == "sequential" {
					binary.BigEndian.PutUint64(ukey[:8], uint64(i))
				} else {
					binary.BigEndian.PutUint64(ukey[:8], rng.Uint64())
				}
				key = base.MakeInternalKey(key[:0], ukey[:], base.SeqNum(i), base.KindSet)
				err := s.Add(key, value)
				if errors.Is(err, ErrArenaFull) {
					b.StopTimer()
					s = NewSkiplist(NewArena(arenaSize))
					b.StartTimer()
					err = s.Add(key, value)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("parallel-random", func(b *testing.B) {
		b.ReportAllocs()
		// About 150 bytes per entry: size the arena for b.N of them.
		s := NewSkiplist(NewArena(int(min(uint64(b.N)*256+uint64(MinArenaSize), MaxArenaSize))))
		var seq atomic.Uint64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			rng := rand.New(rand.NewPCG(seq.Add(1), 3))
			key := make([]byte, 0, 16+base.TrailerLen)
			var ukey [16]byte
			for pb.Next() {
				binary.BigEndian.PutUint64(ukey[:8], rng.Uint64())
				key = base.MakeInternalKey(key[:0], ukey[:], base.SeqNum(seq.Add(1)), base.KindSet)
				if err := s.Add(key, value); err != nil && !errors.Is(err, ErrArenaFull) {
					b.Fatal(err)
				}
			}
		})
	})
}

func BenchmarkSkiplistGet(b *testing.B) {
	const n = 1 << 20
	s := NewSkiplist(NewArena(256 << 20))
	rng := rand.New(rand.NewPCG(1, 2))
	ukeys := make([][]byte, n)
	value := make([]byte, 100)
	for i := range ukeys {
		ukeys[i] = binary.BigEndian.AppendUint64(make([]byte, 0, 16), rng.Uint64())
		if err := s.Add(base.MakeInternalKey(nil, ukeys[i], base.SeqNum(i+1), base.KindSet), value); err != nil {
			b.Fatal(err)
		}
	}
	for _, hit := range []bool{true, false} {
		name := "miss"
		if hit {
			name = "hit"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			search := make([]byte, 0, 32)
			found := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				uk := ukeys[i%n]
				if !hit {
					// A key between uk and its successor.
					search = append(append(search[:0], uk...), 0)
					search = base.MakeInternalKey(search[:len(search)], nil, base.SeqNumMax, base.KindMax)
				} else {
					search = base.MakeSearchKey(search[:0], uk, base.SeqNumMax)
				}
				ikey, _, ok := s.Get(search)
				if ok && bytes.Equal(base.UserKey(ikey), uk) {
					found++
				}
			}
			b.StopTimer()
			if want := map[bool]int{true: b.N, false: 0}[hit]; found != want {
				b.Fatalf("found %d, want %d", found, want)
			}
		})
	}
}

func BenchmarkIteratorNext(b *testing.B) {
	s := NewSkiplist(NewArena(64 << 20))
	for i := range 100000 {
		if err := s.Add(base.MakeInternalKey(nil, binary.BigEndian.AppendUint64(nil, uint64(i)), 1, base.KindSet), nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	var it Iterator
	it.Init(s)
	it.First()
	for i := 0; i < b.N; i++ {
		if !it.Valid() {
			it.First()
		}
		it.Next()
	}
}
