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
}

func (a *applier) begin(f *FSM, db *lsm.DB) {
	a.f, a.db = f, db
	if a.batch == nil || a.batch.Len() > 4<<20 {
		a.batch = lsm.NewBatch() // do not keep a large buffer around
	}
	a.batch.Reset()
	a.overlay.reset()
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
		var result []byte
		if b, err := encodeResult(resp, argErr); err != nil {
			return nil, err
		} else if len(b) <= f.opts.MaxSessionResultBytes {
			result = b
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

func encodeResult(resp proto.Message, argErr error) ([]byte, error) {
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
		r, err := a.put(op.Put, index)
		if err != nil {
			return nil, nil, err
		}
		r.Header = hdr
		return r, nil, nil
	case *fsmpb.Command_Delete:
		r, err := a.delete(op.Delete)
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
		r, err := a.txn(op.Txn, index)
		if err != nil {
			return nil, nil, err
		}
		r.Header = hdr
		return r, nil, nil
	}
	// limits.op refused every other case.
	panic(fmt.Sprintf("fsm: unvalidated operation %T", cmd.GetOp()))
}

// get reads key as the batch built so far leaves it.
func (a *applier) get(key []byte) (record, bool, error) {
	if rec, found, decided := a.overlay.lookup(key); decided {
		return rec, found, nil
	}
	a.keyBuf = userKey(a.keyBuf[:0], key)
	v, err := a.db.Get(a.keyBuf)
	if errors.Is(err, lsm.ErrNotFound) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, fmt.Errorf("reading %q: %w", key, err)
	}
	rec, err := decodeRecord(v)
	if err != nil {
		return record{}, false, fmt.Errorf("key %q: %w", key, err)
	}
	return rec, true, nil
}

// meta is get without the value (the record's value is nil): the engine's
// value is decoded in place (lsm.DB.GetFunc), not copied. A put needs only
// the previous version's metadata unless it returns the previous value.
func (a *applier) meta(key []byte) (record, bool, error) {
	if rec, found, decided := a.overlay.lookup(key); decided {
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

func (a *applier) put(r *cairnpb.PutRequest, index uint64) (*cairnpb.PutResponse, error) {
	key := r.GetKey()
	lookup := a.meta
	if r.GetPrevKv() {
		lookup = a.get
	}
	old, found, err := lookup(key)
	if err != nil {
		return nil, err
	}
	rec := record{version: 1, createIndex: index, modIndex: index, value: r.GetValue()}
	if found {
		rec.version = old.version + 1
		rec.createIndex = old.createIndex
	}
	a.overlay.put(key, rec)
	a.keyBuf = userKey(a.keyBuf[:0], key)
	a.recBuf = encodeRecord(a.recBuf[:0], &rec)
	a.batch.Set(a.keyBuf, a.recBuf)
	resp := &cairnpb.PutResponse{Version: rec.version, CreateIndex: rec.createIndex, ModIndex: rec.modIndex}
	if found && r.GetPrevKv() {
		resp.PrevKv = old.keyValue(key, true)
	}
	return resp, nil
}

func (a *applier) delete(r *cairnpb.DeleteRequest) (*cairnpb.DeleteResponse, error) {
	key := r.GetKey()
	old, found, err := a.get(key)
	if err != nil || !found {
		return &cairnpb.DeleteResponse{}, err
	}
	a.overlay.delete(key)
	a.keyBuf = userKey(a.keyBuf[:0], key)
	a.batch.Delete(a.keyBuf)
	resp := &cairnpb.DeleteResponse{Deleted: 1}
	if r.GetPrevKv() {
		resp.PrevKv = old.keyValue(key, true)
	}
	return resp, nil
}

func (a *applier) deleteRange(r *cairnpb.DeleteRangeRequest) *cairnpb.DeleteRangeResponse {
	lo, hi, err := a.f.limits.keyRange(r.GetStart(), r.GetEnd(), r.GetPrefix())
	if err != nil {
		// limits.op validated the request.
		panic(fmt.Sprintf("fsm: unvalidated range: %v", err))
	}
	if hi != nil && bytes.Equal(lo, hi) {
		return &cairnpb.DeleteRangeResponse{}
	}
	a.overlay.deleteRange(lo, hi)
	end := userSpaceEnd
	if hi != nil {
		end = userKey(nil, hi)
	}
	a.batch.DeleteRange(userKey(nil, lo), end)
	return &cairnpb.DeleteRangeResponse{}
}

func (a *applier) txn(r *cairnpb.TxnRequest, index uint64) (*cairnpb.TxnResponse, error) {
	succeeded := true
	for _, c := range r.GetCompare() {
		rec, found, err := a.get(c.GetKey())
		if err != nil {
			return nil, err
		}
		if !compare(c, &rec, found) {
			succeeded = false
			break
		}
	}
	ops := r.GetSuccess()
	if !succeeded {
		ops = r.GetFailure()
	}
	resp := &cairnpb.TxnResponse{Succeeded: succeeded, Responses: make([]*cairnpb.ResponseOp, 0, len(ops))}
	for _, op := range ops {
		var out cairnpb.ResponseOp
		switch op := op.GetRequest().(type) {
		case *cairnpb.RequestOp_Put:
			pr, err := a.put(op.Put, index)
			if err != nil {
				return nil, err
			}
			out.Response = &cairnpb.ResponseOp_Put{Put: pr}
		case *cairnpb.RequestOp_Get:
			rec, found, err := a.get(op.Get.GetKey())
			if err != nil {
				return nil, err
			}
			gr := &cairnpb.GetResponse{}
			if found {
				gr.Kv = rec.keyValue(op.Get.GetKey(), true)
			}
			out.Response = &cairnpb.ResponseOp_Get{Get: gr}
		case *cairnpb.RequestOp_Delete:
			dr, err := a.delete(op.Delete)
			if err != nil {
				return nil, err
			}
			out.Response = &cairnpb.ResponseOp_Delete{Delete: dr}
		case *cairnpb.RequestOp_DeleteRange:
			out.Response = &cairnpb.ResponseOp_DeleteRange{DeleteRange: a.deleteRange(op.DeleteRange)}
		}
		resp.Responses = append(resp.Responses, &out)
	}
	return resp, nil
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
