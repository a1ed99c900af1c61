package authz_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/internal/testnats"
)

// quotaTable adds to tableYAML a label bounding each submitter's
// unfinished batches, and a send rate for alice slow enough that no send
// of this test finds her bucket refilled.
const quotaTable = tableYAML + `
  capped:
    domain: pay
    users: [alice, bob]
    mode: atomic
    priority: med
    max_per_submitter: 2
    functions:
      noop: {}
callers:
  alice: {send_rate: 0.001, send_burst: 3}
`

// withTable restarts the bundle's authz with tableYAML.
func (b *bundle) withTable(t *testing.T, tableYAML string) {
	t.Helper()
	table, err := authz.ParseTable([]byte(tableYAML))
	if err != nil {
		t.Fatal(err)
	}
	b.stop()
	b.runAuthz(t, authz.Options{Table: table})
}

// tooMany checks that err is a 429 whose message says want.
func tooMany(t *testing.T, what string, err error, want string) {
	t.Helper()
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeTooManyRequests || !errors.Is(err, client.ErrTooManyRequests) || !strings.Contains(ae.Message, want) {
		t.Fatalf("%s: got %v, want 429 saying %q", what, err, want)
	}
}

// TestSendRateBoundPerCaller: a caller's sends beyond its rate's bucket
// are refused with 429 naming the rate, before anything is recorded;
// another caller's sends are not.
func TestSendRateBoundPerCaller(t *testing.T) {
	b := setup(t)
	b.withTable(t, quotaTable)
	req := api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}}
	for range 3 {
		answered(t, "alice's send", func() (*api.SendReply, error) { return b.client(t, "alice").Send(b.ctx, req) })
	}
	_, err := b.client(t, "alice").Send(b.ctx, req)
	tooMany(t, "alice's fourth send", err, "alice sends more than 0.001 per second (send_rate 0.001, send_burst 3)")
	for range 5 {
		answered(t, "bob's send", func() (*api.SendReply, error) { return b.client(t, "bob").Send(b.ctx, req) })
	}
}

// TestUnfinishedBoundPerSubmitter: under a label with max_per_submitter,
// a submitter's batch beyond the bound is refused with 429 naming it,
// whoever else submits; once one of the submitter's batches finishes,
// the next is accepted.
func TestUnfinishedBoundPerSubmitter(t *testing.T) {
	b := setup(t)
	b.withTable(t, strings.Replace(quotaTable, "callers:\n  alice: {send_rate: 0.001, send_burst: 3}\n", "", 1))
	req := api.SendRequest{Label: "capped", Functions: api.Calls{noop()}}
	var first uint64
	for i := range 2 {
		rep := answered(t, "alice's send", func() (*api.SendReply, error) { return b.client(t, "alice").Send(b.ctx, req) })
		if i == 0 {
			first = rep.ID
		}
	}
	_, err := b.client(t, "alice").Send(b.ctx, req)
	tooMany(t, "alice's third unfinished batch", err, `alice has 2 unfinished batches under label "capped", its limit (max_per_submitter 2)`)
	// Bob has his own bound.
	for range 2 {
		answered(t, "bob's send", func() (*api.SendReply, error) { return b.client(t, "bob").Send(b.ctx, req) })
	}
	_, err = b.client(t, "bob").Send(b.ctx, req)
	tooMany(t, "bob's third unfinished batch", err, "bob has 2 unfinished batches")

	b.settled(t, first)
	testnats.Eventually(t, 10*time.Second, "alice's finished batch frees her a slot", func() bool {
		_, err := b.client(t, "alice").Send(b.ctx, req)
		if err != nil && !errors.Is(err, client.ErrTooManyRequests) {
			t.Fatalf("alice's send after her batch finished: %v", err)
		}
		return err == nil
	})
}
