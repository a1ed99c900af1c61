package authz

import (
	"context"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// internalService starts a server with the domain pay and returns an authz
// Service on it (not running: the test calls its methods) with the
// authorization table tableYAML, and a context bounded for the test.
func internalService(t *testing.T, tableYAML string) (*Service, *Table, context.Context) {
	t.Helper()
	s, table, _, ctx := internalServiceEnv(t, tableYAML, 20*time.Second)
	return s, table, ctx
}

// internalServiceEnv is internalService that also returns the server's
// env, for a test that starts more on it, with a context bounded to d.
func internalServiceEnv(t *testing.T, tableYAML string, d time.Duration) (*Service, *Table, *testnats.Env, context.Context) {
	t.Helper()
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, d)
	table, err := ParseTable([]byte(tableYAML))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, env.Conn(t, "authz"), Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return s, table, env, ctx
}

// queuedIDs lists the ids of the batches whose tokens wait in the domain
// pay's queue of priority prio, oldest first.
func queuedIDs(ctx context.Context, t *testing.T, s *Service, prio pipeline.Priority) []uint64 {
	t.Helper()
	return queueIDs(ctx, t, s.queueEdits, prio)
}

// queueIDs is queuedIDs over the queue editor alone.
func queueIDs(ctx context.Context, t *testing.T, qe *queueEditor, prio pipeline.Priority) []uint64 {
	t.Helper()
	items, err := qe.live(ctx, "pay", prio)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, it := range items {
		ids = append(ids, it.ID)
	}
	return ids
}
