package authz_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
)

// TestNoWorkerSaysWhy: a batch whose function type no worker serves is
// not left queued in silence: `batch` and `inflight` say why it waits and
// since when, written once however often the processor asks again.
func TestNoWorkerSaysWhy(t *testing.T) {
	b := setup(t)
	table, err := authz.ParseTable([]byte(tableYAML + `
  unserved:
    domain: pay
    users: [alice]
    mode: non_atomic
    priority: med
    functions:
      nobody.serves: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	b.stop()
	b.runAuthz(t, authz.Options{Table: table})
	id := b.send(t, "alice", "unserved", api.CallSpec{Type: "nobody.serves"})
	owner := b.client(t, "owner")
	var rep *api.BatchReply
	for range 3 { // asked again, the reason stays one record
		b.proc.Tick(b.ctx, 1)
	}
	rep = answered(t, "batch", func() (*api.BatchReply, error) {
		return owner.Batch(b.ctx, api.IDRequest{ID: id})
	})
	if rep.Progress == nil || rep.Progress.Waiting == nil {
		t.Fatalf("batch %d: progress %+v: want why it waits", id, rep.Progress)
	}
	w := rep.Progress.Waiting
	if w.Reason != "no worker serves `nobody.serves`" || w.Type != "nobody.serves" || w.Since.IsZero() {
		t.Fatalf("waiting %+v", w)
	}
	if w.Since.After(time.Now()) {
		t.Fatalf("waiting since %s, in the future", w.Since)
	}
	fl := answered(t, "inflight", func() (*api.InFlightReply, error) {
		return owner.InFlight(b.ctx, api.InFlightRequest{Domain: domain})
	})
	var found bool
	for _, it := range fl.Items {
		if it.ID == id {
			found = true
			if it.Waiting == nil || !strings.Contains(it.Waiting.Reason, "nobody.serves") || it.Attempts != 0 {
				t.Fatalf("inflight item %+v: want the waiting reason and no attempt", it)
			}
		}
	}
	if !found {
		t.Fatalf("batch %d not in flight: %+v", id, fl.Items)
	}
}
