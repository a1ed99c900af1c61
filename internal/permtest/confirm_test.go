package permtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// confirmTable has one label whose only function must be confirmed by bob.
const confirmTable = `
labels:
  settle:
    domain: payments
    users: [alice]
    mode: non_atomic
    priority: med
    functions:
      noop: {confirm: {timeout: 1m, by: [bob]}}
`

// runAuthz runs the real authorization service with table until the test ends.
func (s *suite) runAuthz(t *testing.T, table string) {
	t.Helper()
	tbl, err := authz.ParseTable([]byte(table))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := authz.New(ctx, s.env.Conn(t, "authz"), authz.Options{Table: tbl})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	testnats.Eventually(t, 5*time.Second, "authz answers", func() bool {
		_, err := s.adminNC.Request("$SRV.PING."+streams.AuthzService, nil, 100*time.Millisecond)
		return err == nil
	})
}

// authzCall sends a JSON request to authz as the role and returns the
// error code of the answer ("" on success) and its message.
func (r *role) authzCall(t *testing.T, op string, req, out any) (code, msg string) {
	t.Helper()
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opWait)
	defer cancel()
	m, err := r.nc.RequestWithContext(ctx, streams.AuthzSubject(r.user, op), data)
	if err != nil {
		t.Fatalf("%s %s: %v%s", r.user, op, err, r.reported())
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		return code, m.Header.Get(micro.ErrorHeader)
	}
	if out != nil {
		if err := json.Unmarshal(m.Data, out); err != nil {
			t.Fatalf("%s %s: answer %s: %v", r.user, op, m.Data, err)
		}
	}
	return "", ""
}

// TestConfirmOnlyThroughAuthz: a confirmation names its confirmer, and only
// authz, which learns the caller from the subject, writes that name. The
// oracle can no longer put a confirmation on the stream that claims to be
// bob's; through authz, confirmers the function's rule does not list are
// refused, and the one it lists is recorded under its own name.
func TestConfirmOnlyThroughAuthz(t *testing.T) {
	s := start(t)
	s.runAuthz(t, confirmTable)
	alice, bob, oracle := s.as(t, "alice"), s.as(t, "bob"), s.as(t, "oracle")
	var sent api.SendReply
	if code, msg := alice.authzCall(t, "send", api.SendRequest{Label: "settle", Functions: []api.CallSpec{{Type: "noop", Expect: "block-17"}}}, &sent); code != "" {
		t.Fatalf("alice send: %s %s", code, msg)
	}
	subject := streams.ConfirmSubject(domain, sent.ID, 0)

	t.Run("a confirmation in another's name straight to the stream is denied", func(t *testing.T) {
		forged, err := records.Encode(&records.Confirmation{Content: "block-17", By: "bob"})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []*role{oracle, alice, bob} {
			s.deniedInto(t, r, streams.StreamConfirm, subject, func(ctx context.Context) error {
				_, err := r.js.Publish(ctx, subject, forged)
				return err
			})
		}
	})

	t.Run("confirmers the rule does not list are refused by authz", func(t *testing.T) {
		tests := []struct {
			name string
			r    *role
			code string
		}{
			// The oracle may not know about alice's batch: the answer an unknown batch gets.
			{name: "oracle", r: oracle, code: "404"},
			// The submitter may know why.
			{name: "the submitter", r: alice, code: "403"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				before := s.msgs(t, streams.StreamConfirm)
				code, msg := tt.r.authzCall(t, "confirm", api.ConfirmRequest{ID: sent.ID, Content: "block-17"}, nil)
				if code != tt.code {
					t.Fatalf("%s confirm: %q %q, want %s", tt.r.user, code, msg, tt.code)
				}
				if after := s.msgs(t, streams.StreamConfirm); after != before {
					t.Fatalf("CONFIRM went from %d to %d messages after a refused confirmation", before, after)
				}
			})
		}
	})

	t.Run("the listed confirmer's confirmation carries its own name", func(t *testing.T) {
		if code, msg := bob.authzCall(t, "confirm", api.ConfirmRequest{ID: sent.ID, Content: "block-17"}, nil); code != "" {
			t.Fatalf("bob confirm: %s %s", code, msg)
		}
		ctx, cancel := context.WithTimeout(context.Background(), opWait)
		defer cancel()
		st, err := s.admin.Stream(ctx, streams.StreamConfirm)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			t.Fatal(err)
		}
		c, err := records.Decode[records.Confirmation](m.Data)
		if err != nil || c.By != "bob" || c.Content != "block-17" {
			t.Fatalf("stored confirmation %+v (%v), want bob's block-17", c, err)
		}
	})
}
