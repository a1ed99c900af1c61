package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// TestErrorReplies: authz's error replies come back as *client.Error with
// the operation, code and message, matching the sentinel of their code.
func TestErrorReplies(t *testing.T) {
	b := setup(t)
	sent, err := b.alice.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		op   string
		code int
		is   error
	}{
		{name: "unknown batch", op: "batch", code: 404, is: client.ErrNotFound, call: func() error {
			_, err := b.owner.Batch(b.ctx, api.IDRequest{ID: 999_999})
			return err
		}},
		{name: "another's batch reads as unknown", op: "batch", code: 404, is: client.ErrNotFound, call: func() error {
			_, err := b.bob.Batch(b.ctx, api.IDRequest{ID: sent.ID})
			return err
		}},
		{name: "pause by a non-owner", op: "pause", code: 403, is: client.ErrForbidden, call: func() error {
			_, err := b.alice.Pause(b.ctx, api.DomainRequest{Domain: domain})
			return err
		}},
		{name: "unknown label", op: "send", code: 404, is: client.ErrNotFound, call: func() error {
			_, err := b.alice.Send(b.ctx, api.SendRequest{Label: "nope", Functions: api.Calls{noop()}})
			return err
		}},
		{name: "function not on the label", op: "send", code: 400, is: client.ErrBadRequest, call: func() error {
			_, err := b.alice.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{{Type: "ledger.transfer"}}})
			return err
		}},
		{name: "evict past the end", op: "evict", code: 416, is: client.ErrOutOfBounds, call: func() error {
			_, err := b.owner.Evict(b.ctx, api.PositionRequest{Domain: domain, Priority: pipeline.High, Position: 5})
			return err
		}},
		{name: "over the submitter's bound", op: "send", code: 429, is: client.ErrTooManyRequests, call: func() error {
			// Nothing ticks the processor here: the first stays unfinished.
			req := api.SendRequest{Label: "capped", Functions: api.Calls{noop()}}
			if _, err := b.bob.Send(b.ctx, req); err != nil {
				return fmt.Errorf("the first send under the bound: %w", err)
			}
			_, err := b.bob.Send(b.ctx, req)
			return err
		}},
		{name: "replay of no dead letter", op: "replay", code: 404, is: client.ErrNotFound, call: func() error {
			_, err := b.owner.Replay(b.ctx, api.ReplayRequest{Seq: 12345})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var ae *client.Error
			if !errors.As(err, &ae) {
				t.Fatalf("got %v (%T), want a *client.Error", err, err)
			}
			if ae.Op != tc.op || ae.Code != tc.code || ae.Message == "" {
				t.Fatalf("got %+v, want op %s code %d and authz's message", ae, tc.op, tc.code)
			}
			if !errors.Is(err, tc.is) {
				t.Fatalf("%v does not match %v", err, tc.is)
			}
			for _, other := range []error{client.ErrBadRequest, client.ErrForbidden, client.ErrNotFound, client.ErrOutOfBounds, client.ErrConflict, client.ErrTooManyRequests} {
				if other != tc.is && errors.Is(err, other) {
					t.Fatalf("%v also matches %v", err, other)
				}
			}
		})
	}
}

// TestNotRunning: with no authz serving, a request fails at once with
// ErrNotRunning, which is nats.ErrNoResponders too.
func TestNotRunning(t *testing.T) {
	env := testnats.Start(t, []string{domain})
	c, err := client.New(env.Conn(t, "alice"), "alice", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Send(testnats.Context(t, 10*time.Second), api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}})
	if !errors.Is(err, client.ErrNotRunning) || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("got %v, want ErrNotRunning and nats.ErrNoResponders", err)
	}
}

// TestDeniedRequestGetsNoAnswer: a request the server's permissions deny
// is dropped without an answer; the client says it got none, within its
// timeout, and a caller's cancellation stays a cancellation.
func TestDeniedRequestGetsNoAnswer(t *testing.T) {
	b := setup(t, testnats.WithUser("mallory", "tick."+domain))
	c, err := client.New(b.env.Conn(t, "mallory"), "mallory", client.Config{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}})
	if !errors.Is(err, client.ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNoAnswer", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("answered after %v, want about the 200ms timeout", d)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	if _, err := c.Reload(ctx); !errors.Is(err, context.Canceled) || errors.Is(err, client.ErrNoAnswer) {
		t.Fatalf("cancelled: got %v, want context.Canceled", err)
	}
}

// TestInvalidRequestsNotSent: a request that cannot be valid is refused
// with ErrInvalid before it is sent (no authz runs here, so a sent one
// would fail with ErrNotRunning instead).
func TestInvalidRequestsNotSent(t *testing.T) {
	env := testnats.Start(t, []string{domain})
	c, err := client.New(env.Conn(t, "owner"), "owner", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testnats.Context(t, 10*time.Second)
	med := pipeline.Med
	for _, tc := range []struct {
		name, want string
		call       func() error
	}{
		{"send without a label", "label is empty", func() error {
			_, err := c.Send(ctx, api.SendRequest{Functions: api.Calls{noop()}})
			return err
		}},
		{"send without functions", "no functions", func() error {
			_, err := c.Send(ctx, api.SendRequest{Label: "jobs"})
			return err
		}},
		{"send of a function without a type", "functions[1]", func() error {
			_, err := c.Send(ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{noop(), {}}})
			return err
		}},
		{"batch 0", "id is 0", func() error { _, err := c.Batch(ctx, api.IDRequest{}); return err }},
		{"confirm a negative index", "index is -1", func() error {
			_, err := c.Confirm(ctx, api.ConfirmRequest{ID: 1, Index: -1})
			return err
		}},
		{"queue without a priority", "priority", func() error {
			_, err := c.Queue(ctx, api.QueueRequest{Domain: domain})
			return err
		}},
		{"queue of a reversed range", "range [3, 1)", func() error {
			_, err := c.Queue(ctx, api.QueueRequest{Domain: domain, Priority: med, From: 3, To: 1})
			return err
		}},
		{"pause without a domain", "domain", func() error { _, err := c.Pause(ctx, api.DomainRequest{}); return err }},
		{"resume of a wildcard", "domain", func() error { _, err := c.Resume(ctx, api.DomainRequest{Domain: "*"}); return err }},
		{"evict a negative position", "position is -1", func() error {
			_, err := c.Evict(ctx, api.PositionRequest{Domain: domain, Priority: med, Position: -1})
			return err
		}},
		{"insert without a label", "label is empty", func() error {
			_, err := c.Insert(ctx, api.InsertRequest{Domain: domain, Priority: med, Functions: api.Calls{noop()}})
			return err
		}},
		{"dlq of a bad domain", "domain", func() error { _, err := c.DLQ(ctx, api.DLQRequest{Domain: "a.b"}); return err }},
		{"replay of nothing", "nothing named", func() error { _, err := c.Replay(ctx, api.ReplayRequest{}); return err }},
		{"replay of a seq and all", "both", func() error {
			_, err := c.Replay(ctx, api.ReplayRequest{Seq: 1, All: true})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalid saying %q", err, tc.want)
			}
		})
	}
}

// TestNewRefuses: New refuses what could never get an answer: no
// connection, a user that is not a subject token, a connection whose
// inboxes are not the user's, a negative timeout.
func TestNewRefuses(t *testing.T) {
	env := testnats.Start(t, nil)
	alice := env.Conn(t, "alice")
	plain, err := streams.Connect(streams.Credentials{User: "alice", Password: testnats.Password("alice"), InboxPrefix: "_INBOX"}, env.Server.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, tc := range []struct {
		name, user, want string
		nc               *nats.Conn
		cfg              client.Config
	}{
		{name: "no connection", user: "alice", want: "connection is required"},
		{name: "empty user", nc: alice, want: "user"},
		{name: "user with a dot", nc: alice, user: "a.b", want: "user"},
		{name: "another user's connection", nc: alice, user: "bob", want: "_INBOX_bob."},
		{name: "default inboxes", nc: plain, user: "alice", want: "_INBOX_alice."},
		{name: "negative timeout", nc: alice, user: "alice", cfg: client.Config{Timeout: -time.Second}, want: "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := client.New(tc.nc, tc.user, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
