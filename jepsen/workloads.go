package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cairnkv/cairn/client"
	"github.com/cairnkv/cairn/jepsen/history"
)

func newWorkload(name string, h *history.History) (workload, error) {
	switch name {
	case "register":
		return &registerWorkload{activeKeys: 3, opsPerKey: 400, infosPerKey: 8}, nil
	case "set":
		return &setWorkload{}, nil
	case "bank":
		h.Accounts, h.Total = 5, 500
		return &bankWorkload{accounts: h.Accounts, initial: h.Total / int64(h.Accounts)}, nil
	}
	return nil, fmt.Errorf("unknown workload %q (register, set, bank)", name)
}

// registerWorkload: reads, writes and compare-and-sets on a few keys that
// every worker shares. Every write carries a value no other write uses, so
// a read identifies the write it saw. A key is retired after opsPerKey
// operations and replaced by a fresh one, which keeps each key's history
// (porcupine checks one key at a time) small enough to check. It is also
// retired after infosPerKey indeterminate writes: each of those may take
// effect at any later time, and porcupine's search grows exponentially
// with how many are pending at once (a 10-minute run with every nemesis
// left two keys undecided after 2 minutes of search without this cap).
type registerWorkload struct {
	activeKeys  int
	opsPerKey   int64
	infosPerKey int64
	nextValue   atomic.Int64
	mu          sync.Mutex
	keys        []*regKey
	nextKey     int
}

type regKey struct {
	name  string
	ops   atomic.Int64
	infos atomic.Int64 // indeterminate writes and cas
}

// key returns a key to operate on, rotating retired keys out.
func (r *registerWorkload) key(w *worker) *regKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.keys) < r.activeKeys {
		r.keys = append(r.keys, &regKey{name: fmt.Sprintf("r/%04d", r.nextKey)})
		r.nextKey++
	}
	i := w.rng.IntN(len(r.keys))
	k := r.keys[i]
	if k.ops.Add(1) >= r.opsPerKey || k.infos.Load() >= r.infosPerKey {
		r.keys[i] = &regKey{name: fmt.Sprintf("r/%04d", r.nextKey)}
		r.nextKey++
	}
	return k
}

func (r *registerWorkload) setup(context.Context, *client.Client) error { return nil }

func (r *registerWorkload) step(ctx context.Context, c *client.Client, w *worker) history.Op {
	k := r.key(w)
	op := r.registerOp(ctx, c, w, k.name)
	if op.Outcome == history.Info {
		k.infos.Add(1)
	}
	return op
}

func (r *registerWorkload) registerOp(ctx context.Context, c *client.Client, w *worker, key string) history.Op {
	exp, haveExp := w.last[key]
	switch p := w.rng.IntN(10); {
	case p < 4:
		return r.read(ctx, c, w, key)
	case p < 7 || !haveExp:
		v := r.nextValue.Add(1)
		_, err := c.Put(ctx, []byte(key), []byte(strconv.FormatInt(v, 10)))
		op := history.Op{F: history.Write, Key: key, Value: v, Outcome: writeOutcome(err), Error: errString(err)}
		if errors.Is(err, client.ErrResultUnavailable) {
			op.Outcome = history.OK // applied; only the (empty) result is lost
		}
		if op.Outcome == history.OK {
			w.last[key] = v
		}
		return op
	default:
		v := r.nextValue.Add(1)
		err := c.CompareAndSwap(ctx, []byte(key), []byte(strconv.FormatInt(exp, 10)), []byte(strconv.FormatInt(v, 10)))
		op := history.Op{F: history.CAS, Key: key, Expected: exp, Value: v, Error: errString(err)}
		switch {
		case err == nil:
			op.Outcome = history.OK
			w.last[key] = v
		case errors.Is(err, client.ErrCompareFailed):
			op.Outcome = history.Fail
			delete(w.last, key)
		default:
			op.Outcome = writeOutcome(err)
		}
		return op
	}
}

func (r *registerWorkload) read(ctx context.Context, c *client.Client, w *worker, key string) history.Op {
	kv, err := c.Get(ctx, []byte(key))
	op := history.Op{F: history.Read, Key: key}
	switch {
	case errors.Is(err, client.ErrNotFound):
		op.Outcome = history.OK
	case err != nil:
		op.Outcome, op.Error = readOutcome(err), err.Error()
	default:
		v, perr := strconv.ParseInt(string(kv.Value), 10, 64)
		if perr != nil {
			// Not a value any write wrote: keep it visible to the checker
			// as an impossible value.
			op.Error = fmt.Sprintf("unparsable value %q", kv.Value)
			v = -1
		}
		op.Outcome, op.Found, op.Value = history.OK, true, v
		w.last[key] = v
	}
	return op
}

func (r *registerWorkload) finalReads() []stepFunc {
	r.mu.Lock()
	n := r.nextKey
	r.mu.Unlock()
	var fs []stepFunc
	for i := range n {
		key := fmt.Sprintf("r/%04d", i)
		fs = append(fs, func(ctx context.Context, c *client.Client, w *worker) history.Op {
			return r.read(ctx, c, w, key)
		})
	}
	return fs
}

// setWorkload: every worker adds unique elements (one key per element);
// after recovery one linearizable scan reads them all.
type setWorkload struct {
	next atomic.Int64
}

const setPrefix = "s/"

func (s *setWorkload) setup(context.Context, *client.Client) error { return nil }

func (s *setWorkload) step(ctx context.Context, c *client.Client, w *worker) history.Op {
	v := s.next.Add(1)
	_, err := c.Put(ctx, []byte(fmt.Sprintf("%s%012d", setPrefix, v)), []byte(strconv.FormatInt(v, 10)))
	op := history.Op{F: history.Add, Value: v, Outcome: writeOutcome(err), Error: errString(err)}
	if errors.Is(err, client.ErrResultUnavailable) {
		op.Outcome = history.OK
	}
	return op
}

func (s *setWorkload) readAll(ctx context.Context, c *client.Client, w *worker) history.Op {
	op := history.Op{F: history.ReadAll, Outcome: history.OK}
	it := c.Scan(ctx, nil, nil, client.WithPrefix([]byte(setPrefix)))
	defer it.Close()
	for it.Next() {
		v, err := strconv.ParseInt(strings.TrimPrefix(string(it.KeyValue().Key), setPrefix), 10, 64)
		if err != nil {
			v = -1 // an element nobody added
		}
		op.Values = append(op.Values, v)
	}
	if err := it.Err(); err != nil {
		return history.Op{F: history.ReadAll, Outcome: readOutcome(err), Error: err.Error()}
	}
	return op
}

func (s *setWorkload) finalReads() []stepFunc { return []stepFunc{s.readAll} }

// bankWorkload: accounts whose balances move by transfers, each a Txn
// conditional on both balances' mod index (read just before), and reads of
// all balances in one Txn. The total must never change and no balance may
// go negative.
type bankWorkload struct {
	accounts int
	initial  int64
}

func (b *bankWorkload) key(i int) []byte { return fmt.Appendf(nil, "b/%d", i) }

func (b *bankWorkload) setup(ctx context.Context, c *client.Client) error {
	var puts []client.Op
	for i := range b.accounts {
		puts = append(puts, client.OpPut(b.key(i), []byte(strconv.FormatInt(b.initial, 10))))
	}
	_, err := c.Txn(ctx).If(client.NotExists(b.key(0))).Then(puts...).Commit()
	return err
}

func (b *bankWorkload) step(ctx context.Context, c *client.Client, w *worker) history.Op {
	if w.rng.IntN(4) == 0 {
		return b.readBanks(ctx, c, w)
	}
	from := w.rng.IntN(b.accounts)
	to := (from + 1 + w.rng.IntN(b.accounts-1)) % b.accounts
	amount := int64(1 + w.rng.IntN(5))
	// Plan with ordinary reads (not recorded: they are not the transfer).
	fkv, err1 := c.Get(ctx, b.key(from))
	tkv, err2 := c.Get(ctx, b.key(to))
	if err1 != nil || err2 != nil {
		return history.Op{}
	}
	fb, errF := strconv.ParseInt(string(fkv.Value), 10, 64)
	tb, errT := strconv.ParseInt(string(tkv.Value), 10, 64)
	if errF != nil || errT != nil || fb < amount {
		return history.Op{}
	}
	res, err := c.Txn(ctx).
		If(client.ModIndex(b.key(from)).Equal(fkv.ModIndex), client.ModIndex(b.key(to)).Equal(tkv.ModIndex)).
		Then(client.OpPut(b.key(from), []byte(strconv.FormatInt(fb-amount, 10))),
			client.OpPut(b.key(to), []byte(strconv.FormatInt(tb+amount, 10)))).
		Commit()
	op := history.Op{F: history.Transfer, From: from, To: to, Amount: amount, Outcome: writeOutcome(err), Error: errString(err)}
	if err == nil && !res.Succeeded {
		op.Outcome, op.Error = history.Fail, "balances changed since read"
	}
	return op
}

func (b *bankWorkload) readBanks(ctx context.Context, c *client.Client, w *worker) history.Op {
	var gets []client.Op
	for i := range b.accounts {
		gets = append(gets, client.OpGet(b.key(i)))
	}
	res, err := c.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return history.Op{F: history.ReadBanks, Outcome: history.Fail, Error: err.Error()}
	}
	op := history.Op{F: history.ReadBanks, Outcome: history.OK}
	for _, r := range res.Results {
		bal := int64(-1 << 62) // a missing account: impossible balance
		if r.KV != nil {
			if v, err := strconv.ParseInt(string(r.KV.Value), 10, 64); err == nil {
				bal = v
			}
		}
		op.Balances = append(op.Balances, bal)
	}
	return op
}

func (b *bankWorkload) finalReads() []stepFunc { return []stepFunc{b.readBanks} }
