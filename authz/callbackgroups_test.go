package authz_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// groupOf is the message of a group of Executed callbacks, one per id, as
// a processor of domain publishes it; member i names domains[i] when set.
func groupOf(t *testing.T, ids []uint64, domains map[int]string) *nats.Msg {
	t.Helper()
	cbs := make([]records.Callback, len(ids))
	for i, id := range ids {
		d := domain
		if o, ok := domains[i]; ok {
			d = o
		}
		cbs[i] = records.Callback{BatchID: id, Domain: d, Priority: pipeline.Med, Outcome: pipeline.ExecutedOutcome(1),
			Attempts: 1, At: time.Now(), Processor: "p1",
			Outputs: []pipeline.Output{{Index: 0, Type: "noop", Data: pipeline.MustPayload("kept")}}}
	}
	m, err := streams.CallbackGroupMsg(domain, cbs)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// callbacksDrained waits until authz has settled every callback message.
func (b *bundle) callbacksDrained(t *testing.T) {
	t.Helper()
	admin := b.env.JS(t, "admin")
	testnats.Eventually(t, 10*time.Second, "every callback message settled", func() bool {
		c, err := admin.Consumer(b.ctx, streams.StreamCallbacks, streams.CallbacksConsumer)
		if err != nil {
			return false
		}
		info, err := c.Info(b.ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// appliedOnce fails the test unless batch id's record is Executed with the
// callback's outputs, its outcome applied once.
func (b *bundle) appliedOnce(t *testing.T, id uint64) {
	t.Helper()
	rec := b.record(t, id)
	applied := 0
	for _, ev := range rec.History {
		if ev.What == records.EventCallback {
			applied++
		}
	}
	if rec.Status != pipeline.Executed || applied != 1 || len(rec.Outputs) != 1 {
		t.Fatalf("batch %d: %s, applied %d times, outputs %+v; want Executed, once, with the callback's outputs", id, rec.Status, applied, rec.Outputs)
	}
}

// TestCallbackGroupApplied: the members of a group are applied, each once,
// and the message is acknowledged; the same group again (a processor that
// died before acknowledging its tokens publishes it again) changes nothing.
func TestCallbackGroupApplied(t *testing.T) {
	b := setup(t)
	var ids []uint64
	for range 5 {
		ids = append(ids, b.send(t, "alice", "jobs", noop()))
	}
	admin := b.env.JS(t, "admin")
	for range 2 {
		if _, err := admin.PublishMsg(b.ctx, groupOf(t, ids, nil)); err != nil {
			t.Fatal(err)
		}
	}
	b.callbacksDrained(t)
	for _, id := range ids {
		testnats.Eventually(t, 5*time.Second, "applied", func() bool { return b.record(t, id).Status.Terminal() })
		b.appliedOnce(t, id)
	}
}

// TestCallbackGroupPoisonMember: a member whose batch record cannot be
// read is retried with the group, a bounded number of times, then
// dead-lettered alone, as a single callback (its replay applies it once
// the record is readable); the other members are applied, and the message
// acknowledged.
func TestCallbackGroupPoisonMember(t *testing.T) {
	b := setup(t)
	var ids []uint64
	for range 3 {
		ids = append(ids, b.send(t, "alice", "jobs", noop()))
	}
	poison := ids[1]
	backoff := []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond}
	b.startAuthzWith(t, authz.Options{CallbackBackoff: backoff})
	admin := b.env.JS(t, "admin")
	kv, err := admin.KeyValue(b.ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := kv.Get(b.ctx, streams.BatchKey(poison))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(b.ctx, streams.BatchKey(poison), []byte("\xc1 not msgpack")); err != nil {
		t.Fatal(err)
	}
	n := watchNaks(t, b)
	if _, err := admin.PublishMsg(b.ctx, groupOf(t, ids, nil)); err != nil {
		t.Fatal(err)
	}
	dlq := n.deadLettered(t, b, len(backoff))
	if it := dlq.Items[0]; it.BatchID != poison || !strings.Contains(it.Error, "callback not applied after 4 deliveries") {
		t.Fatalf("dead letter %+v, want batch %d's callback", it, poison)
	}
	b.callbacksDrained(t)
	for _, id := range []uint64{ids[0], ids[2]} {
		b.appliedOnce(t, id)
	}
	// The dead letter holds the member alone, as a single callback.
	dls := testnats.DeadLetters(t, admin)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters", len(dls))
	}
	if cb, err := records.Decode[records.Callback](dls[0].Callback); err != nil || cb.BatchID != poison {
		t.Fatalf("the dead letter's callback %+v (%v), want batch %d's alone", cb, err, poison)
	}
	if _, err := kv.Put(b.ctx, streams.BatchKey(poison), orig.Value()); err != nil {
		t.Fatal(err)
	}
	var rep api.ReplayReply
	if e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Seq: dlq.Items[0].Seq}, &rep); e != nil || len(rep.Replayed) != 1 || rep.Replayed[0].AsNew != poison {
		t.Fatalf("replay: %+v %+v", e, rep)
	}
	b.appliedOnce(t, poison)
}

// TestCallbackGroupMemberOfAnotherDomain: a member that names another
// domain than the subject it came on is refused, as a single callback
// would be; the others are applied.
func TestCallbackGroupMemberOfAnotherDomain(t *testing.T) {
	b := setup(t)
	var ids []uint64
	for range 3 {
		ids = append(ids, b.send(t, "alice", "jobs", noop()))
	}
	admin := b.env.JS(t, "admin")
	if _, err := admin.PublishMsg(b.ctx, groupOf(t, ids, map[int]string{1: "other"})); err != nil {
		t.Fatal(err)
	}
	b.callbacksDrained(t)
	for _, id := range []uint64{ids[0], ids[2]} {
		b.appliedOnce(t, id)
	}
	if rec := b.record(t, ids[1]); rec.Status.Terminal() {
		t.Fatalf("batch %d finished by a callback of another domain: %+v", ids[1], rec)
	}
	if dls := testnats.DeadLetters(t, admin); len(dls) != 0 {
		t.Fatalf("dead letters %+v", dls)
	}
}

// TestCallbackGroupOverTheBound: a message of more callbacks than authz
// applies from one is refused whole: none applied, one dead letter holding
// them all, whose replay applies every one.
func TestCallbackGroupOverTheBound(t *testing.T) {
	b := setup(t)
	var ids []uint64
	for range records.CallbackGroupMax + 1 {
		ids = append(ids, b.send(t, "alice", "jobs", noop()))
	}
	admin := b.env.JS(t, "admin")
	if _, err := admin.PublishMsg(b.ctx, groupOf(t, ids, nil)); err != nil {
		t.Fatal(err)
	}
	var dlq api.DLQReply
	testnats.Eventually(t, 10*time.Second, "the group dead-lettered", func() bool {
		if e := b.call(t, "owner", api.OpDLQ, api.DLQRequest{}, &dlq); e != nil {
			t.Fatalf("dlq: %+v", e)
		}
		return len(dlq.Items) == 1
	})
	if it := dlq.Items[0]; !strings.Contains(it.Error, "a group of 65 callbacks") {
		t.Fatalf("dead letter %+v", it)
	}
	b.callbacksDrained(t)
	for _, id := range ids {
		if rec := b.record(t, id); rec.Status.Terminal() {
			t.Fatalf("batch %d applied from a refused group: %+v", id, rec)
		}
	}
	var rep api.ReplayReply
	if e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Seq: dlq.Items[0].Seq}, &rep); e != nil || len(rep.Replayed) != 1 {
		t.Fatalf("replay: %+v %+v", e, rep)
	}
	for _, id := range ids {
		b.appliedOnce(t, id)
	}
}

// TestRefusedGroupReplaysOnlyItsSubjectsDomain: a group refused whole was
// never checked member by member, so its replay checks each member
// against the domain of the subject it came on: a processor of one domain
// cannot have another domain's batches finished by the owner's replay.
func TestRefusedGroupReplaysOnlyItsSubjectsDomain(t *testing.T) {
	b := setup(t)
	var ids []uint64
	for range records.CallbackGroupMax + 1 {
		ids = append(ids, b.send(t, "alice", "jobs", noop()))
	}
	// The members name their batches' own domain, but the message comes
	// on another domain's callback subject.
	forged := groupOf(t, ids, nil)
	forged.Subject = streams.CallbackSubject("other")
	admin := b.env.JS(t, "admin")
	if _, err := admin.PublishMsg(b.ctx, forged); err != nil {
		t.Fatal(err)
	}
	var dlq api.DLQReply
	testnats.Eventually(t, 10*time.Second, "the group dead-lettered", func() bool {
		if e := b.call(t, "owner", api.OpDLQ, api.DLQRequest{}, &dlq); e != nil {
			t.Fatalf("dlq: %+v", e)
		}
		return len(dlq.Items) == 1
	})
	var rep api.ReplayReply
	e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Seq: dlq.Items[0].Seq}, &rep)
	if e == nil || e.Code != strconv.Itoa(api.CodeConflict) || !strings.Contains(e.Msg, "came on other's callback subject") {
		t.Fatalf("replay of a forged group: %+v %+v, want a 409 naming the subject's domain", e, rep)
	}
	for _, id := range ids {
		if rec := b.record(t, id); rec.Status.Terminal() {
			t.Fatalf("batch %d finished by a replayed group of another domain's subject: %+v", id, rec)
		}
	}
}
