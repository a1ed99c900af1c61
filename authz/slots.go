package authz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/streams"
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

// reserve takes a slot for id under label, refusing with CodeConflict when
// max batches are in process; force takes it regardless (the owner). A slot
// id already holds is kept as it is: a retried submission of the same
// batch takes one slot, however many times it is retried.
func (s *Service) reserve(ctx context.Context, label string, max int, id uint64, force bool) error {
	_, err := s.updateSlots(ctx, label, func(sl *slots) (bool, error) {
		if _, held := sl.IDs[id]; held {
			return false, nil
		}
		if !force && len(sl.IDs) >= max {
			s.reclaim(ctx, sl)
		}
		if !force && len(sl.IDs) >= max {
			return false, errf(CodeConflict, "authz: label %q has %d batches in process, its limit", logging.Capped(label), max)
		}
		sl.IDs[id] = s.opts.Now().UTC()
		return true, nil
	})
	if errors.Is(err, streams.ErrConflict) {
		return errf(CodeConflict, "authz: label %q is too busy to count; try again", logging.Capped(label))
	}
	return err
}

// release frees id's slot under label, if it holds one.
func (s *Service) release(ctx context.Context, label string, id uint64) error {
	_, err := s.updateSlots(ctx, label, func(sl *slots) (bool, error) {
		_, held := sl.IDs[id]
		delete(sl.IDs, id)
		return held, nil
	})
	if err != nil {
		return fmt.Errorf("authz: release slot of batch %d: %w", id, err)
	}
	return nil
}

// updateSlots applies change to label's slots with compare-and-set; change
// reports whether it changed anything worth writing.
func (s *Service) updateSlots(ctx context.Context, label string, change func(*slots) (bool, error)) (uint64, error) {
	return streams.UpdateKV(ctx, s.locks, streams.SlotKey(label), func(cur []byte, exists bool) ([]byte, error) {
		sl := &slots{IDs: map[uint64]time.Time{}}
		if exists {
			if err := json.Unmarshal(cur, sl); err != nil {
				return nil, fmt.Errorf("authz: slots of %q: %w", logging.Capped(label), err)
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
func (s *Service) reclaim(ctx context.Context, sl *slots) {
	now := s.opts.Now()
	for id, at := range sl.IDs {
		if now.Sub(at) < reclaimAfter {
			continue
		}
		rec, err := s.record(ctx, id)
		var ae *Error
		if errors.As(err, &ae) && ae.Code == CodeNotFound || err == nil && rec.Status.Terminal() {
			delete(sl.IDs, id)
		}
	}
}
