package dashboard_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/processor"
)

// TestPurgeDeadLetters: the owner purges dead letters through the
// dashboard, one by its seq, none of those older than an hour, then all
// of the domain's; alice is refused whatever she names, a POST without
// the session's token or from another site is refused before authz is
// asked, and a request that names no dead letter, a bad duration or a bad
// domain is a 400 that says what was wrong.
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
		rep, err := b.owner.DLQ(b.ctx, api.DLQRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(rep.Items)
	}
	one := `{"seq":` + jsonNumber(seqs[0]) + `}`
	for _, body := range []string{one, `{"domain":"pay","all":true}`, `{"domain":"pay","older_than":"1ns"}`, `{"all":true}`} {
		if code, out := b.call(t, http.MethodPost, "/api/purge", alice, aliceCSRF, body); code != http.StatusForbidden {
			t.Errorf("alice purges %s: %d %v, want 403", body, code, out)
		}
	}
	for _, c := range []struct {
		name   string
		csrf   string
		header []string
	}{
		{name: "no CSRF token"},
		{name: "alice's token", csrf: aliceCSRF},
		{name: "another site", csrf: csrf, header: []string{"Origin", "http://evil.example"}},
		{name: "a cross-site fetch", csrf: csrf, header: []string{"Sec-Fetch-Site", "cross-site"}},
	} {
		if code, out := b.call(t, http.MethodPost, "/api/purge", owner, c.csrf, `{"all":true}`, c.header...); code != http.StatusForbidden {
			t.Errorf("%s: %d %v, want 403", c.name, code, out)
		}
	}
	for _, c := range []struct{ name, body, says string }{
		{"nothing named", `{}`, "nothing named"},
		{"a bad duration", `{"older_than":"soon"}`, `duration "soon"`},
		{"a negative duration", `{"domain":"pay","older_than":"-1h"}`, "positive duration"},
		{"two at once", `{"all":true,"seq":1}`, "more than one"},
		{"a bad domain", `{"domain":"a.b","all":true}`, "a.b"},
		{"an unknown field", `{"all":true,"as":"owner"}`, "unknown field"},
	} {
		code, out := b.call(t, http.MethodPost, "/api/purge", owner, csrf, c.body)
		if msg, _ := out["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %d %v, want 400 saying %q", c.name, code, out, c.says)
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
	if code, out := b.call(t, http.MethodPost, "/api/purge", owner, csrf, one); code != http.StatusNotFound {
		t.Fatalf("owner purges the same one again: %d %v, want 404", code, out)
	}
	// None was dead-lettered an hour ago: a purge of those older keeps all.
	if code, out := b.call(t, http.MethodPost, "/api/purge", owner, csrf, `{"domain":"pay","older_than":"1h"}`); code != http.StatusOK || out["purged"] != 0.0 {
		t.Fatalf("owner purges those older than 1h: %d %v", code, out)
	}
	if n := dead(); n != 2 {
		t.Fatalf("%d dead letters after purging those older than 1h, want 2", n)
	}
	if code, out := b.call(t, http.MethodPost, "/api/purge", owner, csrf, `{"domain":"pay","all":true}`); code != http.StatusOK || out["purged"] != 2.0 {
		t.Fatalf("owner purges all of pay: %d %v", code, out)
	}
	if n := dead(); n != 0 {
		t.Fatalf("%d dead letters after purging all of pay, want 0", n)
	}
}
