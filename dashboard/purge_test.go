package dashboard_test

import (
	"net/http"
	"testing"

	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/processor"
)

// TestPurgeDeadLetters: the owner purges dead letters through the
// dashboard, one by its seq and then every one; alice is refused, and a
// request that names no dead letter or a bad duration is a 400 that says
// what was wrong.
func TestPurgeDeadLetters(t *testing.T) {
	b := setup(t)
	p, err := processor.New(b.ctx, b.env.Conn(t, "processor"), processor.Options{Domain: domain, Name: "processor-purge", Pace: processor.PaceTick})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for range 3 {
		rec := b.settledBy(t, p, b.send(t, fail()))
		if rec.DeadLetter == 0 {
			t.Fatalf("batch %d finished %s without a dead letter", rec.Batch.ID, rec.Status)
		}
		seqs = append(seqs, rec.DeadLetter)
	}
	_, owner := b.login(t, "owner", "local-owner")
	_, alice := b.login(t, "alice", "local-alice")
	if owner == nil || alice == nil {
		t.Fatal("login failed")
	}
	csrf, aliceCSRF := b.session(t, owner).CSRF, b.session(t, alice).CSRF
	dead := func() int {
		t.Helper()
		rep, err := b.owner.DLQ(b.ctx, authz.DLQRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(rep.Items)
	}
	if code, _ := b.call(t, http.MethodPost, "/api/purge", alice, aliceCSRF, `{"all":true}`); code != http.StatusForbidden {
		t.Fatalf("alice purges: %d, want 403", code)
	}
	for _, c := range []struct{ name, body string }{
		{"nothing named", `{}`},
		{"a bad duration", `{"older_than":"soon"}`},
		{"two at once", `{"all":true,"seq":1}`},
	} {
		if code, out := b.call(t, http.MethodPost, "/api/purge", owner, csrf, c.body); code != http.StatusBadRequest || out["error"] == "" {
			t.Errorf("%s: %d %v, want 400 saying what was wrong", c.name, code, out)
		}
	}
	if n := dead(); n != 3 {
		t.Fatalf("%d dead letters after refused purges, want 3", n)
	}
	if code, out := b.call(t, http.MethodPost, "/api/purge", owner, csrf, `{"seq":`+jsonNumber(seqs[0])+`}`); code != http.StatusOK || out["purged"] != 1.0 {
		t.Fatalf("owner purges one: %d %v", code, out)
	}
	if n := dead(); n != 2 {
		t.Fatalf("%d dead letters after purging one, want 2", n)
	}
	if code, out := b.call(t, http.MethodPost, "/api/purge", owner, csrf, `{"all":true}`); code != http.StatusOK || out["purged"] != 2.0 {
		t.Fatalf("owner purges all: %d %v", code, out)
	}
	if n := dead(); n != 0 {
		t.Fatalf("%d dead letters after purging all, want 0", n)
	}
}
