package fsm

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"

	"github.com/cairnkv/cairn/api/cairnpb"
	"github.com/cairnkv/cairn/fsm/fsmpb"
	"github.com/cairnkv/cairn/lsm"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

// Apply applies one committed entry; see ApplyBatch.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed raft entries as one engine batch, together
// with the index and term of the last of them, and returns one result per
// entry:
//
//   - for a LogCommand entry, the command's response (*cairnpb.PutResponse,
//     *cairnpb.DeleteResponse, *cairnpb.DeleteRangeResponse or
//     *cairnpb.TxnResponse, with header.applied_index and raft_term set) or
//     an error: one wrapping ErrInvalidArgument (the command changed
//     nothing), ErrResultUnavailable (a duplicate whose result is gone), or
//     one wrapping ErrHalted;
//   - nil for other entries (configuration changes) and for entries at or
//     below the applied index, which are skipped: they are already in the
//     engine (raft replays them after a restart).
//
// If the engine fails, every result is the error and the FSM halts (see
// ErrHalted); the engine holds the effects of a prefix of the batch
// (usually none of it: a batch is written as one engine batch unless its
// effects pass 64 MiB), together with the index that prefix reaches.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	results := make([]interface{}, len(logs))
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	f.mu.RLock()
	defer f.mu.RUnlock()
	fail := func(err error) []interface{} {
		for i := range results {
			results[i] = err
		}
		return results
	}
	if err := f.usableLocked(); err != nil {
		return fail(err)
	}
	a := &f.ap
	a.begin(f, f.mu.db)
	defer a.end()
	st := f.state
	for i, l := range logs {
		if l.Index <= st.index {
			continue
		}
		st.index, st.term = l.Index, l.Term
		if l.Type != raft.LogCommand {
			continue
		}
		res, err := a.command(l, &st)
		if err != nil {
			return fail(f.halt(fmt.Errorf("applying entry %d: %w", l.Index, err)))
		}
		results[i] = res
		if a.batch.Len() >= maxEngineBatchBytes && i < len(logs)-1 {
			// Write what the batch holds so far, with its own applied
			// index, so that an engine batch stays bounded.
			if err := f.commitLocked(st); err != nil {
				return fail(err)
			}
			a.begin(f, f.mu.db)
		}
	}
	if st.index != f.state.index {
		if err := f.commitLocked(st); err != nil {
			return fail(err)
		}
	}
	return results
}

// maxEngineBatchBytes bounds an engine write batch: a raft batch whose
// effects grow past it is written as several engine batches, each with the
// applied index of its last entry (so each is a consistent prefix). A
// variable for tests.
var maxEngineBatchBytes = 64 << 20

// commitLocked writes the batch being built, with applied state st.
// REQUIRES: applyMu and mu (read) held.
func (f *FSM) commitLocked(st appliedState) error {
	a := &f.ap
	a.batch.Set(keyApplied, st.encode())
	wo := lsm.NoSync
	if f.opts.SyncWrites {
		wo = lsm.Sync
	}
	if err := f.mu.db.Write(a.batch, wo); err != nil {
		return f.halt(fmt.Errorf("writing entries up to %d: %w", st.index, err))
	}
	f.state = st
	f.sessions.batchWritten()
	f.applied.Store(st.index)
	f.notify.notify()
	return nil
}

// applier builds one engine batch out of a batch of entries. It is reused
// from batch to batch. REQUIRES: the FSM's applyMu held.
type applier struct {
	f       *FSM
	db      *lsm.DB
	batch   *lsm.Batch
	overlay overlay
	keyBuf  []byte
	recBuf  []byte

	// reads holds the records read from the engine for responses since
	// the batch began (by user key), so that responses reading the same
	// key share one copy of its value: a Txn of 128 Gets of one key, or
	// many such Txns in one raft batch, read and copy its value once. An
	// entry stays valid as long as the overlay, which decides every key
	// written since (the engine changes only when the batch is written).
	reads map[string]record
	// txnReads are the keys the running Txn added to reads: a refused
	// Txn's responses are dropped, and so are the values it read.
	txnReads []string

	// staging is set while a Txn's operations run: their writes go to
	// txnOverlay and staged instead of overlay and batch, and reach those
	// (commitStaged) only once every operation has run, so that a Txn
	// refused midway (its response past its bound) writes nothing.
	staging    bool
	txnOverlay overlay
	staged     []stagedWrite
}

// stagedWrite is a write of a Txn waiting for the Txn to complete.
type stagedWrite struct {
	kind stagedKind
	// key is the key of a put or delete, the start of a range deletion;
	// end the range's end (nil: unbounded).
	key, end []byte
	rec      record
}

type stagedKind uint8

const (
	stagedPut stagedKind = iota
	stagedDelete
	stagedDeleteRange
)

func (a *applier) begin(f *FSM, db *lsm.DB) {
	a.f, a.db = f, db
	if a.batch == nil || a.batch.Len() > 4<<20 {
		a.batch = lsm.NewBatch() // do not keep a large buffer around
	}
	a.batch.Reset()
	a.overlay.reset()
	a.end()
}

// end drops what the applier holds for the batch beyond its buffers: the
// values read for responses (the responses keep what they need) and a Txn
// that an engine failure interrupted.
func (a *applier) end() {
	clear(a.reads)
	a.dropStaged()
}

// command applies one command entry. It returns the entry's result, or an
// error if the engine failed (which halts the FSM): any error that is a
// function of the log alone is a result, so that every replica returns the
// same one.
func (a *applier) command(l *raft.Log, st *appliedState) (interface{}, error) {
	cmd, err := Decode(l.Data)
	if err != nil {
		return err, nil
	}
	if !l.AppendedAt.IsZero() {
		st.clock = max(st.clock, l.AppendedAt.UnixNano())
	}
	f := a.f
	f.sessions.expire(a.batch, st.clock, f.opts.SessionTTL)

	id, seq := cmd.GetClientId(), cmd.GetSeq()
	if err := f.limits.session(cmd); err != nil {
		return err, nil
	}
	if id != "" {
		if s := f.sessions.get(id); s != nil && seq <= s.seq {
			f.duplicates.Add(1)
			return a.duplicate(s, seq)
		}
	}
	resp, argErr, err := a.execute(cmd, l.Index, l.Term)
	if err != nil {
		return nil, err
	}
	if id != "" {
		result, err := encodeResult(resp, argErr, f.opts.MaxSessionResultBytes)
		if err != nil {
			return nil, err
		}
		f.sessions.record(a.batch, f.opts.MaxSessions, id, seq, l.Index, st.clock, result)
	}
	if argErr != nil {
		return argErr, nil
	}
	return resp, nil
}

// duplicate returns the remembered result of a write already applied.
func (a *applier) duplicate(s *session, seq uint64) (interface{}, error) {
	if seq < s.seq {
		return ErrResultUnavailable, nil
	}
	b, err := a.f.sessions.result(a.db, s)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return ErrResultUnavailable, nil
	}
	var r fsmpb.Result
	if err := proto.Unmarshal(b, &r); err != nil {
		return nil, corruptionf("session %q: undecodable result: %v", s.id, err)
	}
	switch r := r.GetResult().(type) {
	case *fsmpb.Result_Put:
		return r.Put, nil
	case *fsmpb.Result_Delete:
		return r.Delete, nil
	case *fsmpb.Result_DeleteRange:
		return r.DeleteRange, nil
	case *fsmpb.Result_Txn:
		return r.Txn, nil
	case *fsmpb.Result_Error:
		return errorFromResult(r.Error), nil
	default:
		return nil, corruptionf("session %q: empty result", s.id)
	}
}

// encodeResult returns the encoded result a session retains, or nil if it
// would be larger than maxBytes: its size is computed first, so a large
// response is never marshalled only to be dropped.
func encodeResult(resp proto.Message, argErr error, maxBytes int) ([]byte, error) {
	var r fsmpb.Result
	switch m := resp.(type) {
	case *cairnpb.PutResponse:
		r.Result = &fsmpb.Result_Put{Put: m}
	case *cairnpb.DeleteResponse:
		r.Result = &fsmpb.Result_Delete{Delete: m}
	case *cairnpb.DeleteRangeResponse:
		r.Result = &fsmpb.Result_DeleteRange{DeleteRange: m}
	case *cairnpb.TxnResponse:
		r.Result = &fsmpb.Result_Txn{Txn: m}
	case nil:
		e, ok := errorResult(argErr)
		if !ok {
			return nil, fmt.Errorf("unexpected command error %w", argErr)
		}
		r.Result = &fsmpb.Result_Error{Error: e}
	default:
		return nil, fmt.Errorf("unexpected response %T", resp)
	}
	if proto.Size(&r) > maxBytes {
		return nil, nil
	}
	return proto.Marshal(&r)
}

// execute validates and applies a command's operation. argErr is a
// validation failure (nothing applied); err an engine failure.
func (a *applier) execute(cmd *fsmpb.Command, index, term uint64) (resp proto.Message, argErr, err error) {
	if err := a.f.limits.op(cmd); err != nil {
		return nil, err, nil
	}
	hdr := &cairnpb.ResponseHeader{RaftTerm: term, AppliedIndex: index}
	switch op := cmd.GetOp().(type) {
	case *fsmpb.Command_Put:
		r, err := a.put(op.Put, index, nil)
		if err != nil {
			return nil, nil, err
		}
		r.Header = hdr
		return r, nil, nil
	case *fsmpb.Command_Delete:
		r, err := a.delete(op.Delete, nil)
		if err != nil {
			return nil, nil, err
		}
		r.Header = hdr
		return r, nil, nil
	case *fsmpb.Command_DeleteRange:
		r := a.deleteRange(op.DeleteRange)
		r.Header = hdr
		return r, nil, nil
	case *fsmpb.Command_Txn:
		r, argErr, err := a.txn(op.Txn, index, cmd.GetMaxTxnResponseBytes())
		if argErr != nil || err != nil {
			return nil, argErr, err
		}
		r.Header = hdr
		return r, nil, nil
	}
	// limits.op refused every other case.
	panic(fmt.Sprintf("fsm: unvalidated operation %T", cmd.GetOp()))
}

// lookup returns what the writes made since the batch began say of key
// (see overlay.lookup): a Txn's own staged writes first, then the batch's.
func (a *applier) lookup(key []byte) (rec record, found, decided bool) {
	if a.staging {
		if rec, found, decided := a.txnOverlay.lookup(key); decided {
			return rec, found, true
		}
	}
	return a.overlay.lookup(key)
}

// errResponseBound is read's refusal of a value that would take a Txn's
// response past its bound.
var errResponseBound = errors.New("fsm: txn response bound")

// responseBudget counts the keys and values a Txn's response carries
// against the command's bound (Command.max_txn_response_bytes).
type responseBudget struct {
	limit uint64 // 0: unbounded (a command logged before the bound existed)
	used  uint64
}

// take counts n more bytes and reports whether the response stays within
// the bound. A nil budget is unbounded.
func (b *responseBudget) take(n int) bool {
	if b == nil || b.limit == 0 {
		return true
	}
	b.used += uint64(n)
	return b.used <= b.limit
}

// read returns key's record, its value included, as the batch built so
// far leaves it, for a response: the key and its value are counted against
// budget (nil: unbounded) before the value is copied, and a value that
// would take the response past the bound is not copied at all
// (errResponseBound). A value read from the engine is read and copied
// once per batch (a.reads), however many responses carry it; one written
// in the batch is the request's own.
func (a *applier) read(key []byte, budget *responseBudget) (record, bool, error) {
	rec, found, decided := a.lookup(key)
	if !decided {
		rec, found = a.reads[string(key)]
		decided = found
	}
	if decided {
		if found && !budget.take(len(key)+len(rec.value)) {
			return record{}, false, errResponseBound
		}
		return rec, found, nil
	}
	a.keyBuf = userKey(a.keyBuf[:0], key)
	err := a.db.GetFunc(a.keyBuf, func(v []byte) error {
		var err error
		if rec, err = decodeRecord(v); err != nil {
			return err
		}
		if !budget.take(len(key) + len(rec.value)) {
			return errResponseBound
		}
		rec.value = bytes.Clone(rec.value)
		if a.reads == nil {
			a.reads = make(map[string]record)
		}
		k := string(key)
		a.reads[k] = rec
		if a.staging {
			a.txnReads = append(a.txnReads, k)
		}
		return nil
	})
	switch {
	case err == nil:
		return rec, true, nil
	case errors.Is(err, lsm.ErrNotFound):
		return record{}, false, nil
	case errors.Is(err, errResponseBound):
		return record{}, false, err
	case errors.Is(err, errCorruption):
		return record{}, false, fmt.Errorf("key %q: %w", key, err)
	}
	return record{}, false, fmt.Errorf("reading %q: %w", key, err)
}

// meta is read without the value (the record's value is nil): the
// engine's value is decoded in place (lsm.DB.GetFunc), not copied. A put
// or delete needs only the previous version's metadata unless it returns
// the previous value.
func (a *applier) meta(key []byte) (record, bool, error) {
	if rec, found, decided := a.lookup(key); decided {
		rec.value = nil
		return rec, found, nil
	}
	a.keyBuf = userKey(a.keyBuf[:0], key)
	var rec record
	err := a.db.GetFunc(a.keyBuf, func(v []byte) error {
		var err error
		rec, err = decodeRecord(v)
		rec.value = nil
		return err
	})
	if errors.Is(err, lsm.ErrNotFound) {
		return record{}, false, nil
	}
	if err != nil {
		if errors.Is(err, errCorruption) {
			return record{}, false, fmt.Errorf("key %q: %w", key, err)
		}
		return record{}, false, fmt.Errorf("reading %q: %w", key, err)
	}
	return rec, true, nil
}

// compareKey evaluates one validated Compare against its key as the batch
// built so far leaves it. The engine's value is compared in place, never
// copied: a Txn's compares allocate nothing in proportion to the values
// they compare.
func (a *applier) compareKey(c *cairnpb.Compare) (bool, error) {
	key := c.GetKey()
	if c.GetTarget() != cairnpb.Compare_VALUE {
		rec, found, err := a.meta(key)
		if err != nil {
			return false, err
		}
		return compare(c, &rec, found), nil
	}
	if rec, found, decided := a.lookup(key); decided {
		return compare(c, &rec, found), nil
	}
	a.keyBuf = userKey(a.keyBuf[:0], key)
	var ok bool
	err := a.db.GetFunc(a.keyBuf, func(v []byte) error {
		rec, err := decodeRecord(v)
		if err != nil {
			return err
		}
		ok = compare(c, &rec, true)
		return nil
	})
	switch {
	case err == nil:
		return ok, nil
	case errors.Is(err, lsm.ErrNotFound):
		return compare(c, &record{}, false), nil
	case errors.Is(err, errCorruption):
		return false, fmt.Errorf("key %q: %w", key, err)
	}
	return false, fmt.Errorf("reading %q: %w", key, err)
}

// setKey, deleteKey and deleteKeys write to the batch being built (and its
// overlay), or stage the write while a Txn runs.

func (a *applier) setKey(key []byte, rec record) {
	if a.staging {
		a.txnOverlay.put(key, rec)
		a.staged = append(a.staged, stagedWrite{kind: stagedPut, key: key, rec: rec})
		return
	}
	a.overlay.put(key, rec)
	a.keyBuf = userKey(a.keyBuf[:0], key)
	a.recBuf = encodeRecord(a.recBuf[:0], &rec)
	a.batch.Set(a.keyBuf, a.recBuf)
}

func (a *applier) deleteKey(key []byte) {
	if a.staging {
		a.txnOverlay.delete(key)
		a.staged = append(a.staged, stagedWrite{kind: stagedDelete, key: key})
		return
	}
	a.overlay.delete(key)
	a.keyBuf = userKey(a.keyBuf[:0], key)
	a.batch.Delete(a.keyBuf)
}

// deleteKeys deletes the user keys [lo, hi) (hi nil: unbounded) with one
// range deletion: no key of the range is visited.
func (a *applier) deleteKeys(lo, hi []byte) {
	if a.staging {
		a.txnOverlay.deleteRange(lo, hi)
		a.staged = append(a.staged, stagedWrite{kind: stagedDeleteRange, key: lo, end: hi})
		return
	}
	a.overlay.deleteRange(lo, hi)
	end := userSpaceEnd
	if hi != nil {
		end = userKey(nil, hi)
	}
	a.batch.DeleteRange(userKey(nil, lo), end)
}

// stage starts staging a Txn's writes.
func (a *applier) stage() {
	a.dropStaged()
	a.txnOverlay.reset()
	a.staging = true
}

// commitStaged writes a Txn's staged writes to the batch, in order.
func (a *applier) commitStaged() {
	a.staging = false
	for i := range a.staged {
		w := &a.staged[i]
		switch w.kind {
		case stagedPut:
			a.setKey(w.key, w.rec)
		case stagedDelete:
			a.deleteKey(w.key)
		case stagedDeleteRange:
			a.deleteKeys(w.key, w.end)
		}
	}
	a.dropStaged()
}

// dropStaged forgets a Txn's staged writes (and which reads it added).
func (a *applier) dropStaged() {
	a.staging = false
	clear(a.staged)
	a.staged = a.staged[:0]
	clear(a.txnReads)
	a.txnReads = a.txnReads[:0]
}

// put applies a Put; its prev_kv, if asked for, is counted against budget
// (nil: unbounded), and errResponseBound returned if it does not fit.
func (a *applier) put(r *cairnpb.PutRequest, index uint64, budget *responseBudget) (*cairnpb.PutResponse, error) {
	key := r.GetKey()
	var old record
	var found bool
	var err error
	if r.GetPrevKv() {
		old, found, err = a.read(key, budget)
	} else {
		old, found, err = a.meta(key)
	}
	if err != nil {
		return nil, err
	}
	rec := record{version: 1, createIndex: index, modIndex: index, value: r.GetValue()}
	if found {
		rec.version = old.version + 1
		rec.createIndex = old.createIndex
	}
	a.setKey(key, rec)
	resp := &cairnpb.PutResponse{Version: rec.version, CreateIndex: rec.createIndex, ModIndex: rec.modIndex}
	if found && r.GetPrevKv() {
		resp.PrevKv = old.keyValue(key, true)
	}
	return resp, nil
}

// delete applies a Delete; its prev_kv as put's.
func (a *applier) delete(r *cairnpb.DeleteRequest, budget *responseBudget) (*cairnpb.DeleteResponse, error) {
	key := r.GetKey()
	var old record
	var found bool
	var err error
	if r.GetPrevKv() {
		old, found, err = a.read(key, budget)
	} else {
		old, found, err = a.meta(key)
	}
	if err != nil || !found {
		return &cairnpb.DeleteResponse{}, err
	}
	a.deleteKey(key)
	resp := &cairnpb.DeleteResponse{Deleted: 1}
	if r.GetPrevKv() {
		resp.PrevKv = old.keyValue(key, true)
	}
	return resp, nil
}

// deleteRange applies a DeleteRange as one range deletion: neither the
// deleted keys nor their values are read, and the response carries none.
func (a *applier) deleteRange(r *cairnpb.DeleteRangeRequest) *cairnpb.DeleteRangeResponse {
	lo, hi, err := a.f.limits.keyRange(r.GetStart(), r.GetEnd(), r.GetPrefix())
	if err != nil {
		// limits.op validated the request.
		panic(fmt.Sprintf("fsm: unvalidated range: %v", err))
	}
	if hi != nil && bytes.Equal(lo, hi) {
		return &cairnpb.DeleteRangeResponse{}
	}
	a.deleteKeys(lo, hi)
	return &cairnpb.DeleteRangeResponse{}
}

// txn applies a Txn. Its operations' writes are staged until every
// operation has run: if the response would carry more than maxResponse
// bytes of keys and values (0: no bound), the Txn fails as a whole with an
// argument error (argErr), nothing written, as soon as the read that passes
// the bound is reached (that value is not copied, and no later operation
// runs).
func (a *applier) txn(r *cairnpb.TxnRequest, index, maxResponse uint64) (resp *cairnpb.TxnResponse, argErr, err error) {
	succeeded := true
	for _, c := range r.GetCompare() {
		ok, err := a.compareKey(c)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			succeeded = false
			break
		}
	}
	branch, ops := "success", r.GetSuccess()
	if !succeeded {
		branch, ops = "failure", r.GetFailure()
	}
	budget := &responseBudget{limit: maxResponse}
	a.stage()
	defer a.dropStaged()
	resp = &cairnpb.TxnResponse{Succeeded: succeeded, Responses: make([]*cairnpb.ResponseOp, 0, len(ops))}
	for i, op := range ops {
		var out cairnpb.ResponseOp
		var err error
		switch op := op.GetRequest().(type) {
		case *cairnpb.RequestOp_Put:
			var pr *cairnpb.PutResponse
			if pr, err = a.put(op.Put, index, budget); err == nil {
				out.Response = &cairnpb.ResponseOp_Put{Put: pr}
			}
		case *cairnpb.RequestOp_Get:
			var rec record
			var found bool
			if rec, found, err = a.read(op.Get.GetKey(), budget); err == nil {
				gr := &cairnpb.GetResponse{}
				if found {
					gr.Kv = rec.keyValue(op.Get.GetKey(), true)
				}
				out.Response = &cairnpb.ResponseOp_Get{Get: gr}
			}
		case *cairnpb.RequestOp_Delete:
			var dr *cairnpb.DeleteResponse
			if dr, err = a.delete(op.Delete, budget); err == nil {
				out.Response = &cairnpb.ResponseOp_Delete{Delete: dr}
			}
		case *cairnpb.RequestOp_DeleteRange:
			out.Response = &cairnpb.ResponseOp_DeleteRange{DeleteRange: a.deleteRange(op.DeleteRange)}
		}
		if errors.Is(err, errResponseBound) {
			for _, k := range a.txnReads {
				delete(a.reads, k)
			}
			return nil, invalidf("txn response exceeds the limit of %d bytes of keys and values "+
				"(%s operation %d passes it; read large values with separate Gets)", maxResponse, branch, i), nil
		}
		if err != nil {
			return nil, nil, err
		}
		resp.Responses = append(resp.Responses, &out)
	}
	a.commitStaged()
	return resp, nil, nil
}

// compare evaluates one validated Compare against a key's state.
func compare(c *cairnpb.Compare, rec *record, found bool) bool {
	var order int
	switch c.GetTarget() {
	case cairnpb.Compare_VALUE:
		if !found {
			return false
		}
		order = bytes.Compare(rec.value, c.GetValue())
	case cairnpb.Compare_VERSION:
		order = cmp.Compare(rec.version, c.GetVersion())
	case cairnpb.Compare_MOD_INDEX:
		order = cmp.Compare(rec.modIndex, c.GetModIndex())
	case cairnpb.Compare_CREATE_INDEX:
		order = cmp.Compare(rec.createIndex, c.GetCreateIndex())
	case cairnpb.Compare_EXISTS:
		if found == c.GetExists() {
			order = 0
		} else {
			order = 1
		}
	}
	switch c.GetResult() {
	case cairnpb.Compare_EQUAL:
		return order == 0
	case cairnpb.Compare_NOT_EQUAL:
		return order != 0
	case cairnpb.Compare_GREATER:
		return order > 0
	default: // Compare_LESS
		return order < 0
	}
}
