package analyze

import (
	"fmt"
	"strings"
)

// Policy names a cache replacement policy.
type Policy string

// The simulated policies.
const (
	LRU    Policy = "lru"
	CLOCK  Policy = "clock"
	S3FIFO Policy = "s3fifo"
)

// Policies lists every policy, in the order reports show them.
var Policies = []Policy{LRU, CLOCK, S3FIFO}

// ParsePolicies parses a comma-separated list of policy names.
func ParsePolicies(s string) ([]Policy, error) {
	var out []Policy
	seen := map[Policy]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		p := Policy(f)
		switch p {
		case LRU, CLOCK, S3FIFO:
		default:
			return nil, fmt.Errorf("unknown cache policy %q (want lru, clock or s3fifo)", f)
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cache policy given (want lru, clock or s3fifo)")
	}
	return out, nil
}

// simulator is one simulated cache over dense block ids (>= 0).
type simulator interface {
	// access looks block id up with the given charge and returns whether
	// it was cached. On a miss the block is inserted unless noInsert.
	access(id int32, charge int64, noInsert bool) bool
}

// newSimulator returns an empty cache of policy p holding capacity bytes.
func newSimulator(p Policy, capacity int64) (simulator, error) {
	if capacity < 0 {
		return nil, fmt.Errorf("negative cache size %d", capacity)
	}
	switch p {
	case LRU:
		return newLRU(capacity), nil
	case CLOCK:
		return newClock(capacity), nil
	case S3FIFO:
		return newS3FIFO(capacity), nil
	}
	return nil, fmt.Errorf("unknown cache policy %q", p)
}

// grow returns s extended with zero values so that index i is valid.
func grow[T any](s []T, i int32) []T {
	if int(i) < len(s) {
		return s
	}
	n := max(2*len(s), int(i)+1, 64)
	t := make([]T, n)
	copy(t, s)
	return t
}

// lru is a byte-bounded LRU cache: an intrusive doubly linked list over
// the ids, index 0 of the link slices being the sentinel (ids are stored
// shifted by one).
type lru struct {
	capacity, used int64
	prev, next     []int32 // links of id+1; prev[0]/next[0]: the sentinel
	charge         []int64 // charge of a cached id, 0 if not cached
}

func newLRU(capacity int64) *lru {
	return &lru{capacity: capacity, prev: []int32{0}, next: []int32{0}}
}

func (c *lru) unlink(n int32) {
	p, x := c.prev[n], c.next[n]
	c.next[p], c.prev[x] = x, p
}

func (c *lru) pushFront(n int32) {
	c.prev[n], c.next[n] = 0, c.next[0]
	c.prev[c.next[0]] = n
	c.next[0] = n
}

func (c *lru) access(id int32, charge int64, noInsert bool) bool {
	c.charge = grow(c.charge, id)
	n := id + 1
	if old := c.charge[id]; old > 0 {
		c.unlink(n)
		c.pushFront(n)
		if charge != old {
			c.charge[id] = charge
			c.used += charge - old
			c.evict()
		}
		return true
	}
	if noInsert || charge > c.capacity {
		return false
	}
	c.prev, c.next = grow(c.prev, n), grow(c.next, n)
	c.charge[id] = charge
	c.used += charge
	c.pushFront(n)
	c.evict()
	return false
}

func (c *lru) evict() {
	for c.used > c.capacity {
		n := c.prev[0]
		c.unlink(n)
		c.used -= c.charge[n-1]
		c.charge[n-1] = 0
	}
}

// fifo is a growable ring.
type fifo[T any] struct {
	buf        []T
	head, size int
}

func (q *fifo[T]) push(id T) {
	if q.size == len(q.buf) {
		nb := make([]T, max(2*len(q.buf), 64))
		for i := 0; i < q.size; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = id
	q.size++
}

func (q *fifo[T]) pop() T {
	id := q.buf[q.head]
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return id
}

// clock is CLOCK (second chance) kept as a FIFO of the cached ids.
type clock struct {
	capacity, used int64
	q              fifo[int32]
	charge         []int64 // 0 if not cached
	ref            []bool
}

func newClock(capacity int64) *clock { return &clock{capacity: capacity} }

func (c *clock) access(id int32, charge int64, noInsert bool) bool {
	c.charge, c.ref = grow(c.charge, id), grow(c.ref, id)
	if old := c.charge[id]; old > 0 {
		c.ref[id] = true
		if charge != old {
			c.charge[id] = charge
			c.used += charge - old
			c.evict()
		}
		return true
	}
	if noInsert || charge > c.capacity {
		return false
	}
	c.charge[id], c.ref[id] = charge, false
	c.used += charge
	c.q.push(id)
	c.evict()
	return false
}

func (c *clock) evict() {
	for c.used > c.capacity {
		id := c.q.pop()
		if c.ref[id] {
			c.ref[id] = false
			c.q.push(id)
			continue
		}
		c.used -= c.charge[id]
		c.charge[id] = 0
	}
}

// S3-FIFO queue membership of an id.
const (
	s3None uint8 = iota
	s3Small
	s3Main
)

// ghostEntry is an id remembered by S3-FIFO's ghost queue; it is current
// only while seq equals the id's ghostSeq (entries are invalidated lazily).
type ghostEntry struct {
	id  int32
	seq uint32
}

// s3fifo is S3-FIFO with byte-bounded queues.
type s3fifo struct {
	capacity, smallCap, mainCap int64
	smallUsed, mainUsed         int64
	small, main                 fifo[int32]
	where                       []uint8
	freq                        []uint8
	charge                      []int64
	// ghost queue, oldest first; ghostSeq[id] is the seq of the id's
	// current entry, 0 if it has none.
	ghost       fifo[ghostEntry]
	ghostUsed   int64
	ghostSeq    []uint32
	ghostCharge []int64 // charge remembered by id's current ghost entry
	nextSeq     uint32
}

func newS3FIFO(capacity int64) *s3fifo {
	small := capacity / 10
	return &s3fifo{capacity: capacity, smallCap: small, mainCap: capacity - small}
}

func (c *s3fifo) access(id int32, charge int64, noInsert bool) bool {
	c.where, c.freq = grow(c.where, id), grow(c.freq, id)
	c.charge, c.ghostSeq = grow(c.charge, id), grow(c.ghostSeq, id)
	c.ghostCharge = grow(c.ghostCharge, id)
	if w := c.where[id]; w != s3None {
		c.freq[id] = min(c.freq[id]+1, 3)
		if old := c.charge[id]; charge != old {
			c.charge[id] = charge
			if w == s3Small {
				c.smallUsed += charge - old
			} else {
				c.mainUsed += charge - old
			}
			c.evict()
		}
		return true
	}
	if noInsert || charge > c.capacity {
		return false
	}
	c.charge[id], c.freq[id] = charge, 0
	if c.ghostSeq[id] != 0 {
		c.ghostSeq[id] = 0
		c.ghostUsed -= c.ghostCharge[id]
		c.where[id] = s3Main
		c.mainUsed += charge
		c.main.push(id)
	} else {
		c.where[id] = s3Small
		c.smallUsed += charge
		c.small.push(id)
	}
	c.evict()
	return false
}

func (c *s3fifo) evict() {
	for c.smallUsed+c.mainUsed > c.capacity {
		if c.smallUsed > c.smallCap || c.main.size == 0 {
			c.evictSmall()
		} else {
			c.evictMain()
		}
	}
}

// evictSmall takes the oldest block of the small queue: to the main queue
// if it was hit while in the small one, else out, leaving a ghost entry.
func (c *s3fifo) evictSmall() {
	id := c.small.pop()
	ch := c.charge[id]
	c.smallUsed -= ch
	if c.freq[id] > 0 {
		c.freq[id] = 0
		c.where[id] = s3Main
		c.mainUsed += ch
		c.main.push(id)
		return
	}
	c.where[id], c.charge[id] = s3None, 0
	c.addGhost(id, ch)
}

// evictMain takes the oldest block of the main queue: back to the tail
// with one hit fewer if it has any, else out.
func (c *s3fifo) evictMain() {
	id := c.main.pop()
	if c.freq[id] > 0 {
		c.freq[id]--
		c.main.push(id)
		return
	}
	c.mainUsed -= c.charge[id]
	c.where[id], c.charge[id] = s3None, 0
}

// addGhost remembers id, just evicted from the small queue (so without a
// current ghost entry), and forgets the oldest ghosts beyond the main
// queue's byte budget.
func (c *s3fifo) addGhost(id int32, charge int64) {
	c.nextSeq++
	if c.nextSeq == 0 {
		c.nextSeq = 1
	}
	c.ghostSeq[id], c.ghostCharge[id] = c.nextSeq, charge
	c.ghost.push(ghostEntry{id: id, seq: c.nextSeq})
	c.ghostUsed += charge
	for c.ghostUsed > c.mainCap && c.ghost.size > 0 {
		e := c.ghost.pop()
		if c.ghostSeq[e.id] == e.seq {
			c.ghostSeq[e.id] = 0
			c.ghostUsed -= c.ghostCharge[e.id]
		}
	}
	// Stale entries (ids that left the ghost queue for the main one) are
	// dropped when they reach the head; a queue mostly stale is rebuilt.
	if c.ghost.size > 1024 && c.ghost.size > 4*len(c.ghostSeq) {
		var q fifo[ghostEntry]
		for c.ghost.size > 0 {
			if e := c.ghost.pop(); c.ghostSeq[e.id] == e.seq {
				q.push(e)
			}
		}
		c.ghost = q
	}
}
