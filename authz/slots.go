package authz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
// max batches are in process; force takes it regardless (the owner).
func (s *Service) reserve(ctx context.Context, label string, max int, id uint64, force bool) error {
	for range 20 {
		sl, rev, err := s.slots(ctx, label)
		if err != nil {
			return err
		}
		if !force && len(sl.IDs) >= max {
			s.reclaim(ctx, sl)
		}
		if !force && len(sl.IDs) >= max {
			return errf(CodeConflict, "authz: label %q has %d batches in process, its limit", label, max)
		}
		sl.IDs[id] = s.opts.Now().UTC()
		if err := s.putSlots(ctx, label, sl, rev); errors.Is(err, errConflict) {
			continue
		} else if err != nil {
			return err
		}
		return nil
	}
	return errf(CodeConflict, "authz: label %q is too busy to count; try again", label)
}

// release frees id's slot under label, if it holds one.
func (s *Service) release(ctx context.Context, label string, id uint64) error {
	for range 20 {
		sl, rev, err := s.slots(ctx, label)
		if err != nil {
			return err
		}
		if _, ok := sl.IDs[id]; !ok {
			return nil
		}
		delete(sl.IDs, id)
		if err := s.putSlots(ctx, label, sl, rev); errors.Is(err, errConflict) {
			continue
		} else {
			return err
		}
	}
	return fmt.Errorf("authz: release slot of batch %d: too much contention", id)
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

func (s *Service) slots(ctx context.Context, label string) (*slots, uint64, error) {
	sl := &slots{IDs: map[uint64]time.Time{}}
	e, err := s.locks.Get(ctx, streams.SlotKey(label))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return sl, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("authz: read slots of %q: %w", label, err)
	}
	if err := json.Unmarshal(e.Value(), sl); err != nil {
		return nil, 0, fmt.Errorf("authz: slots of %q: %w", label, err)
	}
	if sl.IDs == nil {
		sl.IDs = map[uint64]time.Time{}
	}
	return sl, e.Revision(), nil
}

func (s *Service) putSlots(ctx context.Context, label string, sl *slots, rev uint64) error {
	v, _ := json.Marshal(sl)
	var err error
	if rev == 0 {
		_, err = s.locks.Create(ctx, streams.SlotKey(label), v)
	} else {
		_, err = s.locks.Update(ctx, streams.SlotKey(label), v, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return errConflict
	}
	return err
}
