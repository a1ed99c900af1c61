package authz

import (
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
)

// The API's views of the records (api.BatchRecord, api.Progress, …) are
// types of their own with the records' JSON, so that the api package needs
// no streams and no nats.go. These copy a record into its view, field for
// field; TestAPIViewsMatchRecords fails when a record gains a field its
// view lacks.

// apiRecord is rec as the batch operation answers it.
func apiRecord(rec *records.BatchRecord) *api.BatchRecord {
	if rec == nil {
		return nil
	}
	out := &api.BatchRecord{V: rec.V, Batch: rec.Batch, Status: rec.Status, Outcome: rec.Outcome,
		IdempotencyKey: rec.IdempotencyKey, Attempts: rec.Attempts, Fallback: rec.Fallback,
		DeadLetter: rec.DeadLetter, ReplayedAs: rec.ReplayedAs, Outputs: rec.Outputs,
		CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, FinishedAt: rec.FinishedAt}
	if rec.History != nil {
		out.History = make([]api.Event, len(rec.History))
		for i, e := range rec.History {
			out.History[i] = api.Event(e)
		}
	}
	return out
}

// apiProgress is p as the batch operation answers it.
func apiProgress(p *records.Progress) *api.Progress {
	if p == nil {
		return nil
	}
	out := &api.Progress{V: p.V, BatchID: p.BatchID, Gen: p.Gen, Rotation: p.Rotation, State: api.State(p.State),
		Next: p.Next, Failures: p.Failures, Rounds: p.Rounds, LastError: p.LastError, NotBefore: p.NotBefore,
		FailedIndex: p.FailedIndex, Fallbacks: p.Fallbacks, Waiting: apiWaiting(p.Waiting), Outputs: p.Outputs,
		Outcome: p.Outcome, UpdatedAt: p.UpdatedAt, By: p.By}
	if p.Parked != nil {
		parked := api.ParkedFunction(*p.Parked)
		out.Parked = &parked
	}
	if p.FallbackDue != nil {
		due := api.DueFallback(*p.FallbackDue)
		out.FallbackDue = &due
	}
	return out
}

// apiWaiting is w as the API answers it.
func apiWaiting(w *records.Waiting) *api.Waiting {
	if w == nil {
		return nil
	}
	out := api.Waiting(*w)
	return &out
}
