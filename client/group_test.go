package client_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/internal/testsystem"
	"github.com/tickflow/tickflow/pipeline"
)

// requestCounter counts alice's authz requests by operation, from a core
// subscription beside authz's.
type requestCounter struct {
	mu  sync.Mutex
	ops map[string]int
}

func countRequests(t *testing.T, b *bundle) *requestCounter {
	t.Helper()
	rc := &requestCounter{ops: map[string]int{}}
	nc := b.env.Conn(t, "authz")
	_, err := nc.Subscribe("authz.alice.*", func(m *nats.Msg) {
		op := m.Subject[len("authz.alice."):]
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.ops[op]++
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return rc
}

// seen waits until the counter has seen at least n requests of the ops
// together, and returns the counts. The counter's subscription is on a
// connection of its own: a reply can reach the client before the request
// reaches the counter. The server hands it a connection's requests in
// order, so once it has seen the last request a test made, it has seen
// every one before.
func (rc *requestCounter) seen(t *testing.T, n int, ops ...string) map[string]int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rc.mu.Lock()
		total := 0
		for _, op := range ops {
			total += rc.ops[op]
		}
		counts := maps.Clone(rc.ops)
		rc.mu.Unlock()
		if total >= n {
			return counts
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests: %v, want at least %d of %v", counts, n, ops)
		}
		time.Sleep(time.Millisecond)
	}
}

// sendAll sends reqs, a goroutine each, returns once they all wait for
// a slot, and answers must be called to wait for their replies.
func sendAll(ctx context.Context, t *testing.T, c *client.Client, reqs []api.SendRequest) (answers func() ([]*api.SendReply, []error)) {
	t.Helper()
	reps, errs := make([]*api.SendReply, len(reqs)), make([]error, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() { reps[i], errs[i] = c.Send(ctx, reqs[i]) })
	}
	testnats.Eventually(t, 10*time.Second, "every send waiting", func() bool { return client.WaitingSends(c) == len(reqs) })
	return func() ([]*api.SendReply, []error) {
		wg.Wait()
		return reps, errs
	}
}

// sendHeld sends reqs while c's request slots are held, so that they all
// wait, then frees the slots and returns their replies, each a success.
func sendHeld(ctx context.Context, t *testing.T, c *client.Client, reqs []api.SendRequest) []*api.SendReply {
	t.Helper()
	release := client.HoldSendSlots(c)
	answers := sendAll(ctx, t, c, reqs)
	release()
	reps, errs := answers()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	return reps
}

// sendThenGroupRan checks that alice's requests were one send and one
// send_many, and that each batch of seen ran.
func sendThenGroupRan(t *testing.T, b *bundle, rc *requestCounter, seen map[uint64]bool) {
	t.Helper()
	if ops := rc.seen(t, 2, api.OpSend, api.OpSendMany); ops[api.OpSend] != 1 || ops[api.OpSendMany] != 1 {
		t.Fatalf("requests: %v, want the first send and one send_many", ops)
	}
	for id := range seen {
		if rec := b.settled(t, id); rec.Status != pipeline.Executed {
			t.Fatalf("batch %d: %s", id, rec.Status)
		}
	}
}

func plainJobs(n int) []api.SendRequest {
	reqs := make([]api.SendRequest, n)
	for i := range reqs {
		reqs[i] = api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}}
	}
	return reqs
}

// TestSendsWaitingGoOutTogether: plain Sends that find every request slot
// taken go out as one send_many once a slot is free, and each is answered
// as its own send: queued, with its own batch, which runs.
func TestSendsWaitingGoOutTogether(t *testing.T) {
	b := setup(t)
	rc := countRequests(t, b)
	c := b.Client(t, "alice", client.Config{SendsInFlight: 1})
	reqs := plainJobs(20)
	reps := sendHeld(b.ctx, t, c, reqs)
	seen := map[uint64]bool{}
	for i := range reqs {
		if reps[i].ID == 0 || seen[reps[i].ID] || reps[i].Domain != domain {
			t.Fatalf("send %d: reply %+v (ids so far %v)", i, reps[i], seen)
		}
		seen[reps[i].ID] = true
	}
	if ops := rc.seen(t, 1, api.OpSendMany); ops[api.OpSendMany] != 1 || ops[api.OpSend] != 0 {
		t.Fatalf("requests: %v, want one send_many and no send", ops)
	}
	for _, r := range reps {
		if rec := b.settled(t, r.ID); rec.Status != pipeline.Executed {
			t.Fatalf("batch %d: %s", r.ID, rec.Status)
		}
	}
}

// TestIdempotentSendsWaitingGoOutTogether: Sends with idempotency keys
// wait and go out together as plain ones do; each is answered as its own
// send: a new key queued with a batch of its own, a key sent before (here
// twice in the group) as the duplicate of its batch, run once.
func TestIdempotentSendsWaitingGoOutTogether(t *testing.T) {
	b := setup(t)
	rc := countRequests(t, b)
	c := b.Client(t, "alice", client.Config{SendsInFlight: 1})
	first, err := c.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}, IdempotencyKey: "sent-before"})
	if err != nil {
		t.Fatal(err)
	}
	reqs := plainJobs(12)
	for i := range reqs {
		reqs[i].IdempotencyKey = fmt.Sprintf("key-%d", i)
	}
	reqs[3].IdempotencyKey, reqs[7].IdempotencyKey = "sent-before", "sent-before"
	reps := sendHeld(b.ctx, t, c, reqs)
	seen := map[uint64]bool{}
	for i := range reqs {
		if i == 3 || i == 7 {
			if reps[i].ID != first.ID || !reps[i].Duplicate {
				t.Fatalf("send %d, a key sent before: %+v, want batch %d as a duplicate", i, reps[i], first.ID)
			}
			continue
		}
		if reps[i].ID == 0 || reps[i].Duplicate || seen[reps[i].ID] {
			t.Fatalf("send %d: reply %+v (ids so far %v)", i, reps[i], seen)
		}
		seen[reps[i].ID] = true
	}
	sendThenGroupRan(t, b, rc, seen)
	if rec := b.settled(t, first.ID); rec.Status != pipeline.Executed || rec.Attempts > 1 {
		t.Fatalf("batch %d sent before: %s, %d attempts", first.ID, rec.Status, rec.Attempts)
	}
}

// TestSendsWaitingOverTheBurstGoOneByOne: a group that authz refuses
// whole, more sends than the caller's burst allows at once, is sent again
// one send at a time, so each is decided as its own send would be: as
// many queued as the burst holds, the others refused for the rate.
func TestSendsWaitingOverTheBurstGoOneByOne(t *testing.T) {
	sys := testsystem.Start(t, testsystem.JobsTable+`callers:
  alice: {send_rate: 0.001, send_burst: 3}
`, testsystem.Options{})
	c := sys.Client(t, "alice", client.Config{SendsInFlight: 1})
	release := client.HoldSendSlots(c)
	answers := sendAll(sys.Ctx, t, c, plainJobs(5))
	release()
	reps, errs := answers()
	queued, refused := 0, 0
	for i := range reps {
		switch {
		case errs[i] == nil && reps[i].ID != 0:
			queued++
		case errors.Is(errs[i], client.ErrTooManyRequests):
			refused++
		default:
			t.Fatalf("send %d: %+v, %v", i, reps[i], errs[i])
		}
	}
	if queued != 3 || refused != 2 {
		t.Fatalf("%d queued and %d refused, want 3 and 2 (the burst)", queued, refused)
	}
}

// TestSendTakingOneOfTheLastSlotsTakesTheSendsThatCome: a plain Send that
// finds a slot free while more than half are taken yields before it goes
// out, and the Sends that came meanwhile and found every slot taken go
// out with it, as one send_many, each answered with a batch of its own;
// a Send that finds most slots free goes out alone at once, without
// yielding.
func TestSendTakingOneOfTheLastSlotsTakesTheSendsThatCome(t *testing.T) {
	b := setup(t)
	rc := countRequests(t, b)
	c := b.Client(t, "alice", client.Config{SendsInFlight: 4})
	const joining = 5
	var yields atomic.Int32
	var answers func() ([]*api.SendReply, []error)
	defer client.SetLeadYield(func() {
		yields.Add(1)
		answers = sendAll(b.ctx, t, c, plainJobs(joining))
	})()

	// One slot of four taken: not busy, alone at once.
	if _, err := c.Send(b.ctx, plainJobs(1)[0]); err != nil {
		t.Fatal(err)
	}
	if n := yields.Load(); n != 0 {
		t.Fatalf("a send with three slots free yielded %d times", n)
	}
	if ops := rc.seen(t, 1, api.OpSend); ops[api.OpSend] != 1 || ops[api.OpSendMany] != 0 {
		t.Fatalf("requests: %v, want one send", ops)
	}

	release := client.HoldSomeSendSlots(c, 3)
	defer release()
	lead, err := c.Send(b.ctx, plainJobs(1)[0])
	if err != nil {
		t.Fatal(err)
	}
	if n := yields.Load(); n != 1 {
		t.Fatalf("the send that took the last slot yielded %d times, want 1", n)
	}
	reps, errs := answers()
	seen := map[uint64]bool{lead.ID: true}
	for i := range reps {
		if errs[i] != nil || reps[i].ID == 0 || seen[reps[i].ID] {
			t.Fatalf("send %d: %+v, %v (ids so far %v)", i, reps[i], errs[i], seen)
		}
		seen[reps[i].ID] = true
	}
	sendThenGroupRan(t, b, rc, seen)
}

// TestSendGivenUpWhileWaitingIsNotSent: a Send whose context ends while it
// waits for a slot returns at once, and nothing of it goes out.
func TestSendGivenUpWhileWaitingIsNotSent(t *testing.T) {
	b := setup(t)
	rc := countRequests(t, b)
	c := b.Client(t, "alice", client.Config{SendsInFlight: 1})
	release := client.HoldSendSlots(c)
	ctx, cancel := context.WithCancel(b.ctx)
	answers := sendAll(ctx, t, c, plainJobs(1))
	cancel()
	_, errs := answers()
	if !errors.Is(errs[0], context.Canceled) || !strings.Contains(errs[0].Error(), "not sent") {
		t.Fatalf("err %v, want a cancel that says it was not sent", errs[0])
	}
	release()
	// A send after it goes out alone, and is the only request.
	if _, err := c.Send(b.ctx, plainJobs(1)[0]); err != nil {
		t.Fatal(err)
	}
	if ops := rc.seen(t, 1, api.OpSend); ops[api.OpSend] != 1 || ops[api.OpSendMany] != 0 {
		t.Fatalf("requests: %v, want the one send after", ops)
	}
}

// TestSendsThatAreNotPlainDoNotWait: a Send with a key or a schedule goes
// out at once even when every slot is taken.
func TestSendsThatAreNotPlainDoNotWait(t *testing.T) {
	b := setup(t)
	c := b.Client(t, "alice", client.Config{SendsInFlight: 1})
	release := client.HoldSendSlots(c)
	defer release()
	for _, req := range []api.SendRequest{
		{Label: "jobs", Functions: api.Calls{noop()}, Key: "k"},
		{Label: "jobs", Functions: api.Calls{noop()}, Delay: "1h"},
	} {
		if _, err := c.Send(b.ctx, req); err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
	}
}

// TestManySendsAtOnce: 300 plain Sends from as many goroutines through 4
// slots are each queued once, with a batch of its own, whichever way
// they were grouped, and no request carried more than its share.
func TestManySendsAtOnce(t *testing.T) {
	b := setup(t)
	rc := countRequests(t, b)
	c := b.Client(t, "alice", client.Config{SendsInFlight: 4})
	const n = 300
	ids := make([]uint64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rep, err := c.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}})
			errs[i] = err
			if err == nil {
				ids[i] = rep.ID
			}
		})
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for i := range n {
		if errs[i] != nil || ids[i] == 0 || seen[ids[i]] {
			t.Fatalf("send %d: id %d, %v", i, ids[i], errs[i])
		}
		seen[ids[i]] = true
	}
	if ops := rc.seen(t, 1, api.OpSend, api.OpSendMany); ops[api.OpSend]+ops[api.OpSendMany] > n {
		t.Fatalf("requests: %v for %d sends", ops, n)
	}
	if client.WaitingSends(c) != 0 {
		t.Fatalf("%d sends still waiting", client.WaitingSends(c))
	}
	rep, err := b.alice.List(b.ctx, api.ListRequest{Limit: n})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Items {
		delete(seen, s.ID)
	}
	if len(seen) != 0 {
		t.Fatalf("%d batches not in alice's listing", len(seen))
	}
}
