package worker

import (
	"context"
	"time"

	"github.com/tickflow/tickflow/internal/drain"
	"github.com/tickflow/tickflow/internal/records"
)

// localRun is what a running worker serves units in process under: Run's
// context and its gate, so that a unit run this way outlives its caller
// and holds up the worker's stop as one sent on work.units does.
type localRun struct {
	ctx  context.Context
	gate *drain.Gate
}

// RunUnits runs atomic units in this process, as a work.units request to
// this worker would, through the same claims and records of their unit
// groups, and returns one reply per unit; the caller is a processor of the
// same process (processor.Options.LocalWorker), which saves the request's
// two messages through the server. ok is false, and nothing ran, when the
// worker does not take them now: it is not serving (not yet, or stopping),
// it has no handler for a function type of theirs, or it has fewer free
// handler slots than units, so that a busy worker of this process leaves
// them to the others rather than making them wait. The units are copied
// first: a handler cannot change the caller's.
func (w *Worker) RunUnits(units []records.WorkRequest, deadline time.Time) (_ []records.WorkReply, ok bool) {
	run := w.local.Load()
	if run == nil || len(units) == 0 {
		return nil, false
	}
	for i := range units {
		for _, c := range units[i].Calls {
			if _, ok := w.mux.Handler(c.Type); !ok {
				return nil, false
			}
		}
	}
	if len(w.sem)+len(units) > cap(w.sem) {
		return nil, false
	}
	data, err := records.Encode(&records.WorkBatch{Units: units})
	if err != nil {
		return nil, false
	}
	wb, err := records.Decode[records.WorkBatch](data)
	if err != nil {
		return nil, false
	}
	if !run.gate.Enter() {
		return nil, false
	}
	defer run.gate.Leave()
	return w.runUnits(run.ctx, wb.Units, deadline), true
}
