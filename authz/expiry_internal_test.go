package authz

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// Retention of the expiry tests: a finished batch's records are kept 10s,
// a dead-lettered one's three minutes; the id log forgets a key after two.
const (
	expiryFinished   = 10 * time.Second
	expiryDeadLetter = 3 * time.Minute
	expiryWindow     = 2 * time.Minute
)

// retainedParts is newParts with the expiry tests' retention, read by the
// record store as New reads it.
func retainedParts(t *testing.T) *parts {
	t.Helper()
	p := newParts(t, testnats.WithSettings(func(s *streams.Settings) {
		s.FinishedMaxAge, s.DLQMaxAge, s.DuplicateWindow = expiryFinished, expiryDeadLetter, expiryWindow
	}))
	if err := p.store.readRetention(p.ctx, p.h.progress, p.progress); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExpiryOf: a running batch's records do not expire; a finished one's
// live what is left of their age (a dead-lettered one's the dead letter's
// age), at least the server's minimum; its idempotency key at least that
// long and at least until the id log forgets the key; without retention
// provisioned nothing expires.
func TestExpiryOf(t *testing.T) {
	p := retainedParts(t)
	if p.store.retention.Finished != expiryFinished || p.store.retention.DeadLetter != expiryDeadLetter || p.store.idsWindow != expiryWindow {
		t.Fatalf("retention read %+v, ids window %v", p.store.retention, p.store.idsWindow)
	}
	kept := p.newStore()
	now := p.clock.Now()
	finished := func(created, at time.Duration, idem string, dl uint64) *records.BatchRecord {
		o := pipeline.ExecutedOutcome(1)
		return &records.BatchRecord{Batch: pipeline.Batch{ID: 7, Submitter: "alice"}, Status: pipeline.Executed, Outcome: &o,
			CreatedAt: now.Add(-created), FinishedAt: now.Add(-at), IdempotencyKey: idem, DeadLetter: dl}
	}
	for _, tc := range []struct {
		name    string
		rs      *recordStore
		rec     *records.BatchRecord
		ttl     time.Duration // 0: no expiry
		idemTTL time.Duration
		writes  bool
	}{
		{name: "running", rs: p.store, rec: &records.BatchRecord{Batch: pipeline.Batch{ID: 7}, Status: pipeline.InProcess, CreatedAt: now}},
		{name: "finished now, accepted now", rs: p.store, rec: finished(0, 0, "", 0), ttl: expiryFinished, idemTTL: expiryWindow},
		{name: "finished 4s ago", rs: p.store, rec: finished(time.Hour, 4*time.Second, "", 0), ttl: 6 * time.Second, idemTTL: 6 * time.Second},
		{name: "finished past its age", rs: p.store, rec: finished(time.Hour, time.Hour, "", 0), ttl: streams.MinTTL, idemTTL: streams.MinTTL},
		{name: "dead-lettered", rs: p.store, rec: finished(time.Hour, 0, "", 3), ttl: expiryDeadLetter, idemTTL: expiryDeadLetter},
		{name: "a key, accepted 30s ago", rs: p.store, rec: finished(30*time.Second, 0, "k", 0), ttl: expiryFinished, idemTTL: 90 * time.Second, writes: true},
		{name: "a key, accepted an hour ago", rs: p.store, rec: finished(time.Hour, 0, "k", 0), ttl: expiryFinished, idemTTL: expiryFinished, writes: true},
		{name: "no retention provisioned", rs: kept, rec: finished(0, 0, "k", 0)},
	} {
		e := tc.rs.expiryOf(tc.rec)
		if got := tc.rs.recordTTL(tc.rec); got != tc.ttl {
			t.Fatalf("%s: record ttl %v, want %v", tc.name, got, tc.ttl)
		}
		if tc.ttl == 0 {
			if e != nil || tc.rs.writes(e) {
				t.Fatalf("%s: expiry %+v, want none", tc.name, e)
			}
			continue
		}
		if e == nil || e.ttl != tc.ttl || e.idemTTL != tc.idemTTL || e.user != "alice" || e.id != 7 || e.idem != tc.rec.IdempotencyKey || tc.rs.writes(e) != tc.writes {
			t.Fatalf("%s: expiry %+v (writes %v), want ttl %v, key's %v (writes %v)", tc.name, e, tc.rs.writes(e), tc.ttl, tc.idemTTL, tc.writes)
		}
	}
}

// TestExpiryExpireKeys: the idempotency key is written again, naming its
// batch, with the expiry's time to live, and the server removes it when
// that runs out; an expiry without a key writes nothing.
func TestExpiryExpireKeys(t *testing.T) {
	p := retainedParts(t)
	admin, err := p.admin.Stream(p.ctx, "KV_"+streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	key := streams.IdempotencyKey("alice", "k-1")
	subject := "$KV." + streams.BucketBatches + "." + key
	if _, err := p.h.batches.Put(p.ctx, key, []byte("41")); err != nil {
		t.Fatal(err)
	}
	before := lastSeq(t, p, admin)
	if err := p.store.expireKeys(p.ctx, &expiry{user: "alice", id: 41, ttl: time.Second, idemTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if seq := lastSeq(t, p, admin); seq != before {
		t.Fatalf("an expiry without a key wrote: last sequence %d, was %d", seq, before)
	}

	long := &expiry{user: "alice", id: 41, idem: "k-1", ttl: expiryFinished, idemTTL: expiryWindow}
	if err := p.store.expireKeys(p.ctx, long); err != nil {
		t.Fatal(err)
	}
	m, err := admin.GetLastMsgForSubject(p.ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "41" || m.Header.Get(jetstream.MsgTTLHeader) != streams.TTLValue(expiryWindow) {
		t.Fatalf("the key as written: %q, ttl %q; want 41, %q", m.Data, m.Header.Get(jetstream.MsgTTLHeader), streams.TTLValue(expiryWindow))
	}
	// Written again with the shortest: gone once it runs out.
	if err := p.store.expireKeys(p.ctx, &expiry{user: "alice", id: 41, idem: "k-1", ttl: streams.MinTTL, idemTTL: streams.MinTTL}); err != nil {
		t.Fatal(err)
	}
	testnats.Eventually(t, 15*time.Second, "the idempotency key expired", func() bool {
		_, err := p.h.batches.Get(p.ctx, key)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
}

func lastSeq(t *testing.T, p *parts, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(p.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// TestExpiryNotFound: a batch without a record whose id the id log
// handed out is answered as one that may have finished and expired,
// naming the age records are kept; an id never handed out, or any id
// where records do not expire, with a plain 404.
func TestExpiryNotFound(t *testing.T) {
	p := retainedParts(t)
	b := p.recordOnly(t, p.batch(nil))
	kept := p.newStore()
	top, err := p.store.idsTop(p.ctx)
	if err != nil || top < b.ID {
		t.Fatalf("ids top %d, %v; want at least the id handed out, %d", top, err, b.ID)
	}
	for _, tc := range []struct {
		name    string
		rs      *recordStore
		id      uint64
		expired bool
	}{
		{name: "handed out", rs: p.store, id: b.ID, expired: true},
		{name: "the top of the block", rs: p.store, id: top, expired: true},
		{name: "never handed out", rs: p.store, id: top + 1},
		{name: "no retention provisioned", rs: kept, id: b.ID},
	} {
		err := tc.rs.notFound(p.ctx, tc.id)
		msg := "authz: no batch " + strconv.FormatUint(tc.id, 10)
		if tc.expired {
			msg += ": it does not exist, or it finished and its record expired (records are kept 10s)"
		}
		if codeOf(err) != api.CodeNotFound || err.Error() != msg {
			t.Fatalf("%s: %v, want a 404 %q", tc.name, err, msg)
		}
	}
	for d, want := range map[time.Duration]string{7 * 24 * time.Hour: "7d", 36 * time.Hour: "36h0m0s", 10 * time.Second: "10s", 24 * time.Hour: "1d"} {
		if got := formatAge(d); got != want {
			t.Fatalf("formatAge(%v) = %q, want %q", d, got, want)
		}
	}
	if !strings.HasPrefix(formatAge(90*time.Minute), "1h30m") {
		t.Fatalf("formatAge(90m) = %q", formatAge(90*time.Minute))
	}
}
