package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

// TestRunningShowsProcessorsAndWorkers: the owner's Running view lists
// every processor replica that runs (its name, domain, since when) and
// every worker (its name, function types, since when), from their presence
// records, and drops a processor once it stops; alice is refused it, by
// authz, as she is the owner's other views.
func TestRunningShowsProcessorsAndWorkers(t *testing.T) {
	b := setup(t)
	p, err := processor.New(b.ctx, b.env.Conn(t, "processor"), processor.Options{Domain: domain, Name: "proc-live"})
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(b.ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = p.Run(pctx) }()
	t.Cleanup(func() { stop(); testnats.Stopped(t, "processor", stopped) })

	_, owner := b.login(t, "owner", "local-owner")
	_, alice := b.login(t, "alice", "local-alice")
	if owner == nil || alice == nil {
		t.Fatal("login failed")
	}
	running := func() api.PresenceReply {
		t.Helper()
		code, out := b.call(t, http.MethodGet, "/api/presence", owner, "", "")
		if code != http.StatusOK {
			t.Fatalf("presence: %d %v", code, out)
		}
		data, _ := json.Marshal(out)
		var rep api.PresenceReply
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	var rep api.PresenceReply
	testnats.Eventually(t, 10*time.Second, "processor and worker listed", func() bool {
		rep = running()
		return len(rep.Processors) == 1 && len(rep.Workers) == 1
	})
	pr, w := rep.Processors[0], rep.Workers[0]
	if pr.Name != "proc-live" || !slices.Equal(pr.Domains, []string{domain}) || len(pr.Types) != 0 || pr.Since.IsZero() || pr.At.Before(pr.Since) {
		t.Fatalf("processor %+v", pr)
	}
	if w.Name != worker.DefaultName || !slices.Contains(w.Types, handlers.TypeNoop) || len(w.Domains) != 0 || w.Since.IsZero() {
		t.Fatalf("worker %+v", w)
	}
	if len(rep.Unserved) != 0 {
		t.Fatalf("everything is served, yet: %v", rep.Unserved)
	}

	if code, out := b.call(t, http.MethodGet, "/api/presence", alice, "", ""); code != http.StatusForbidden {
		t.Fatalf("alice's presence: %d %v, want 403", code, out)
	}

	stop()
	testnats.Stopped(t, "processor", stopped)
	testnats.Eventually(t, 10*time.Second, "stopped processor dropped", func() bool {
		rep = running()
		return len(rep.Processors) == 0 && len(rep.Workers) == 1
	})
	if len(rep.Unserved) != 1 {
		t.Fatalf("with no processor, want one warning about domain %s: %v", domain, rep.Unserved)
	}
}
