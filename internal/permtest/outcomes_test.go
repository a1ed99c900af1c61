package permtest

import (
	"testing"

	"github.com/tickflow/tickflow/internal/streams"
)

// TestOutcomes: authz announces a finished batch on its submitter's
// outcome subject, and each caller hears of its own batches only: no
// caller may subscribe to another's outcomes, nor to all of them through
// a wildcard, nor publish an outcome (forge one) in anyone's name.
func TestOutcomes(t *testing.T) {
	s := start(t)
	callers := []string{"owner", "alice", "bob", "oracle"}
	authz := s.as(t, "authz")
	for _, user := range callers {
		t.Run(user, func(t *testing.T) {
			r := s.as(t, user)
			t.Run("allowed", func(t *testing.T) {
				subject := streams.OutcomeSubject(user, 7)
				sub, err := r.nc.SubscribeSync(streams.OutcomeFilter(user))
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = sub.Unsubscribe() }()
				if err := r.nc.Flush(); err != nil {
					t.Fatal(err)
				}
				if err := authz.nc.Publish(subject, []byte("Executed")); err != nil {
					t.Fatal(err)
				}
				m, err := sub.NextMsg(opWait)
				if err != nil {
					t.Fatalf("%s did not hear of its own outcome on %s: %v%s%s", user, subject, err, r.reported(), authz.reported())
				}
				if m.Subject != subject || string(m.Data) != "Executed" {
					t.Fatalf("heard %q on %s", m.Data, m.Subject)
				}
			})
			t.Run("denied", func(t *testing.T) {
				r.deniedSubscribe(t, "outcomes.>")
				r.deniedSubscribe(t, "outcomes.*.7")
				r.deniedSubscribe(t, ">")
				for _, other := range roles {
					if other != user {
						r.deniedSubscribe(t, streams.OutcomeFilter(other))
						r.deniedSubscribe(t, streams.OutcomeSubject(other, 7))
						r.deniedPublish(t, streams.OutcomeSubject(other, 7))
					}
				}
				r.deniedPublish(t, streams.OutcomeSubject(user, 7))
			})
		})
	}
	// The services hear of no caller's outcomes either.
	for _, user := range []string{"authz", "processor", "worker", "ticker"} {
		t.Run(user, func(t *testing.T) {
			r := s.as(t, user)
			r.deniedSubscribe(t, "outcomes.>")
			r.deniedSubscribe(t, streams.OutcomeFilter("alice"))
			if user != "authz" {
				r.deniedPublish(t, streams.OutcomeSubject("alice", 7))
			}
		})
	}
}
