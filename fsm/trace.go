package fsm

import (
	"io"

	"github.com/cairnkv/cairn/trace"
)

// StartTrace starts a block-cache trace of the engine written to w (see
// lsm.DB.StartTrace). end stops it (lsm.DB.EndTrace), stopped is closed if
// the trace stops writing before end (its size limit, a write error). A
// restore that replaces the engine mid-trace leaves the trace on the old
// engine, which then reports nothing more; end still ends it.
func (f *FSM) StartTrace(opts trace.Options, w io.Writer) (end func() error, stopped <-chan struct{}, err error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	db := f.mu.db
	if db == nil {
		return nil, nil, f.noEngineErr()
	}
	if err := db.StartTrace(opts, w); err != nil {
		return nil, nil, err
	}
	return db.EndTrace, db.TraceStopped(), nil
}
