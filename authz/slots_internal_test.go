package authz

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// The slot keeper alone, on the real buckets: a label's slots fill up to
// their limit, a batch that holds one takes it again freely, a release
// frees one, the owner's force passes the limit, and once reclaimAfter has
// passed a slot whose batch has no record is taken back.
func TestSlotKeeperAlone(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, 20*time.Second)
	js, err := jetstream.New(env.Conn(t, "authz"))
	if err != nil {
		t.Fatal(err)
	}
	locks, err := js.KeyValue(ctx, streams.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	batches, err := js.KeyValue(ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	sk := &slotKeeper{locks: locks, store: &recordStore{js: js, batches: batches, now: clock}, now: clock}
	set := labelSlots("jobs")
	full := func(err error) bool {
		var ae *Error
		return errors.As(err, &ae) && ae.Code == api.CodeConflict
	}

	for _, tc := range []struct {
		name  string
		id    uint64
		force bool
		full  bool
	}{
		{name: "first", id: 1},
		{name: "second", id: 2},
		{name: "over the limit", id: 3, full: true},
		{name: "held already", id: 2},
		{name: "forced past the limit", id: 4, force: true},
	} {
		err := sk.reserve(ctx, set, 2, tc.id, tc.force)
		if tc.full != full(err) || (!tc.full && err != nil) {
			t.Fatalf("%s: reserve batch %d: %v, want full %v", tc.name, tc.id, err, tc.full)
		}
	}
	if err := sk.release(ctx, set, 4); err != nil {
		t.Fatal(err)
	}
	if err := sk.release(ctx, set, 1); err != nil {
		t.Fatal(err)
	}
	if err := sk.reserve(ctx, set, 2, 3, false); err != nil {
		t.Fatalf("reserve after a release: %v", err)
	}
	// Batches 2 and 3 hold the slots, and neither has a record: once
	// reclaimAfter has passed, a reserve that finds the slots full takes
	// them back.
	if err := sk.reserve(ctx, set, 2, 5, false); !full(err) {
		t.Fatalf("reserve before reclaimAfter: %v, want full", err)
	}
	now = now.Add(reclaimAfter)
	if err := sk.reserve(ctx, set, 2, 5, false); err != nil {
		t.Fatalf("reserve after reclaimAfter: %v", err)
	}
}
