package authz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
)

// A label's concurrency limit is enforced with one record per label in the
// locks bucket: the ids of its batches in process, updated with
// compare-and-set so every authz replica sees the same count. An id enters
// before its batch is recorded and leaves when its terminal callback is
// applied. An entry whose batch was never recorded (authz died in between)
// or already finished is reclaimed when the label is full.

// reclaimAfter is how old an entry must be before it may be reclaimed, so
// a submission still in flight keeps its slot.
const reclaimAfter = time.Minute

type slots struct {
	IDs map[uint64]time.Time `json:"ids"`
}

// A submitter's unfinished batches under a label that bounds them
// (Label.MaxPerSubmitter) are counted the same way, in a record of their
// own per label and submitter.

// slotSet names one record of slots: its key in the locks bucket, what
// it counts (for errors), and the refusal of a submission that finds it
// full.
type slotSet struct {
	key, what string
	full      func(max int) *Error
}

// slotKeeper counts the batches in process under a label, and under each
// of its submitters, against the label's limits (Label.MaxConcurrent,
// Label.MaxPerSubmitter).
type slotKeeper struct {
	locks jetstream.KeyValue
	store *recordStore
	now   func() time.Time
	log   *slog.Logger
}

// labelSlots are label's batches in process (Label.MaxConcurrent).
func labelSlots(label string) slotSet {
	return slotSet{key: streams.SlotKey(label), what: fmt.Sprintf("label %q", logging.Capped(label)),
		full: func(max int) *Error {
			return errf(api.CodeConflict, "authz: label %q has %d batches in process, its limit", logging.Capped(label), max)
		}}
}

// submitterSlots are user's unfinished batches under label
// (Label.MaxPerSubmitter).
func submitterSlots(label, user string) slotSet {
	return slotSet{key: streams.SubmitterSlotKey(label, user), what: fmt.Sprintf("%s's batches under label %q", user, logging.Capped(label)),
		full: func(max int) *Error {
			return errf(api.CodeTooManyRequests, "authz: %s has %d unfinished batches under label %q, its limit (max_per_submitter %d); try again once one has finished", user, max, logging.Capped(label), max)
		}}
}

// reserve takes a slot of set for id, refusing with set.full when max
// batches hold one; force takes it regardless (the owner). A slot id
// already holds is kept as it is: a retried submission of the same batch
// takes one slot, however many times it is retried.
func (sk *slotKeeper) reserve(ctx context.Context, set slotSet, max int, id uint64, force bool) error {
	_, err := sk.updateSlots(ctx, set, func(sl *slots) (bool, error) {
		if _, held := sl.IDs[id]; held {
			return false, nil
		}
		if !force && len(sl.IDs) >= max {
			sk.reclaim(ctx, sl)
		}
		if !force && len(sl.IDs) >= max {
			return false, set.full(max)
		}
		sl.IDs[id] = sk.now().UTC()
		return true, nil
	})
	if errors.Is(err, streams.ErrConflict) {
		return errf(api.CodeConflict, "authz: %s are too busy to count; try again", set.what)
	}
	return err
}

// release frees id's slot of set, if it holds one.
func (sk *slotKeeper) release(ctx context.Context, set slotSet, id uint64) error {
	_, err := sk.updateSlots(ctx, set, func(sl *slots) (bool, error) {
		_, held := sl.IDs[id]
		delete(sl.IDs, id)
		return held, nil
	})
	if err != nil {
		return fmt.Errorf("authz: release slot of batch %d: %w", id, err)
	}
	return nil
}

// updateSlots applies change to set's slots with compare-and-set; change
// reports whether it changed anything worth writing.
func (sk *slotKeeper) updateSlots(ctx context.Context, set slotSet, change func(*slots) (bool, error)) (uint64, error) {
	return streams.UpdateKV(ctx, sk.locks, set.key, func(cur []byte, exists bool) ([]byte, error) {
		sl := &slots{IDs: map[uint64]time.Time{}}
		if exists {
			if err := json.Unmarshal(cur, sl); err != nil {
				return nil, fmt.Errorf("authz: slots of %s: %w", set.what, err)
			}
			if sl.IDs == nil {
				sl.IDs = map[uint64]time.Time{}
			}
		}
		if write, err := change(sl); err != nil || !write {
			return nil, err
		}
		return json.Marshal(sl)
	})
}

// reclaim drops entries whose batch is missing or finished.
func (sk *slotKeeper) reclaim(ctx context.Context, sl *slots) {
	now := sk.now()
	for id, at := range sl.IDs {
		if now.Sub(at) < reclaimAfter {
			continue
		}
		rec, err := sk.store.record(ctx, id)
		var ae *Error
		if errors.As(err, &ae) && ae.Code == api.CodeNotFound || err == nil && rec.Status.Terminal() {
			delete(sl.IDs, id)
		}
	}
}

// reserveSlots takes the slots batch id needs under label l: one of the
// submitter's own (Label.MaxPerSubmitter) and one of the label's
// (Label.MaxConcurrent). A refusal gives back what it took, so a refused
// submission holds nothing.
func (sk *slotKeeper) reserveSlots(ctx context.Context, label string, l *Label, user string, id uint64, force bool) error {
	if l.MaxPerSubmitter > 0 {
		if err := sk.reserve(ctx, submitterSlots(label, user), l.MaxPerSubmitter, id, force); err != nil {
			return err
		}
	}
	if l.MaxConcurrent > 0 {
		if err := sk.reserve(ctx, labelSlots(label), l.MaxConcurrent, id, force); err != nil {
			if l.MaxPerSubmitter > 0 {
				if rerr := sk.release(ctx, submitterSlots(label, user), id); rerr != nil {
					// Reclaimed once the submitter is at its bound.
					sk.log.Warn("slot not given back", "batch_id", id, "label", logging.Capped(label), "err", rerr)
				}
			}
			return err
		}
	}
	return nil
}
