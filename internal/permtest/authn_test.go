package permtest

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// connectTCP connects to url as user with password. Authentication is
// tested over TCP: in-process, the server closes the pipe before the client
// reads why, and the client reports a closed pipe after its timeout.
func connectTCP(url, user, password string) error {
	c := testnats.Creds(user)
	c.URL, c.Password = url, password
	nc, err := streams.Connect(c, nats.Timeout(opWait), nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
	}
	return err
}

// listening starts a server from nats.conf that listens on a free loopback
// port, and returns its URL.
func listening(t *testing.T) string {
	t.Helper()
	env := testnats.Start(t, nil, func(o *embedded.Options, _ *streams.Settings) {
		o.DontListen, o.Listen = false, "127.0.0.1:0"
	})
	return env.Server.URL()
}

// TestAuthentication: each user connects with its own password only; a
// wrong password, another user's, or an unknown user is refused.
func TestAuthentication(t *testing.T) {
	url := listening(t)
	for i, user := range roles {
		other := roles[(i+1)%len(roles)]
		t.Run(user, func(t *testing.T) {
			t.Run("allowed", func(t *testing.T) {
				if err := connectTCP(url, user, testnats.Password(user)); err != nil {
					t.Fatalf("%s with its password: %v", user, err)
				}
			})
			t.Run("denied", func(t *testing.T) {
				for _, pw := range []string{testnats.Password(user) + "x", testnats.Password(other), ""} {
					if err := connectTCP(url, user, pw); !errors.Is(err, nats.ErrAuthorization) {
						t.Errorf("%s with password %q: %v, want an authorization error", user, pw, err)
					}
				}
				if err := connectTCP(url, "mallory", testnats.Password(user)); !errors.Is(err, nats.ErrAuthorization) {
					t.Errorf("unknown user with %s's password: %v, want an authorization error", user, err)
				}
			})
		})
	}
}

// TestInboxes: every role reads replies on its own inbox prefix only, so no
// role can read another's replies (PubAcks, fetched messages, answers).
func TestInboxes(t *testing.T) {
	s := start(t)
	for _, user := range roles {
		if user == "admin" {
			continue // admin subscribes to ">"
		}
		t.Run(user, func(t *testing.T) {
			r := s.as(t, user)
			t.Run("allowed", func(t *testing.T) {
				own := "_INBOX_" + user + ".probe"
				sub, err := r.nc.SubscribeSync(own)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = sub.Unsubscribe() }()
				if err := r.nc.Flush(); err != nil {
					t.Fatal(err)
				}
				if err := s.adminNC.Publish(own, []byte("reply")); err != nil {
					t.Fatal(err)
				}
				if _, err := sub.NextMsg(opWait); err != nil {
					t.Fatalf("%s did not receive on its own inbox %s: %v%s", user, own, err, r.reported())
				}
			})
			t.Run("denied", func(t *testing.T) {
				r.deniedSubscribe(t, "_INBOX.>")
				for _, other := range roles {
					if other != user {
						r.deniedSubscribe(t, "_INBOX_"+other+".>")
					}
				}
			})
		})
	}
}

// TestAdmin: admin provisions, and nothing in the account is closed to it;
// its boundary is its password.
func TestAdmin(t *testing.T) {
	s := start(t)
	admin := s.as(t, "admin")
	runBoundaries(t, []boundary{{
		name: "provisioning needs the admin password",
		allowed: func(t *testing.T) {
			admin.allowed(t, "create, use and delete a stream and a consumer", func(ctx context.Context) error {
				st, err := admin.js.CreateStream(ctx, jetstream.StreamConfig{Name: "SCRATCH", Subjects: []string{"scratch.>"}, Storage: jetstream.MemoryStorage})
				if err != nil {
					return err
				}
				if _, err := admin.js.Publish(ctx, "scratch.1", nil); err != nil {
					return err
				}
				if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
					return err
				}
				return admin.js.DeleteStream(ctx, "SCRATCH")
			})
			admin.allowed(t, "publish a token", admin.publishesTo(streams.StreamHigh, highToken()))
		},
		denied: func(t *testing.T) {
			url := listening(t)
			for _, pw := range []string{testnats.Password("authz"), testnats.Password("admin") + " "} {
				if err := connectTCP(url, "admin", pw); !errors.Is(err, nats.ErrAuthorization) {
					t.Errorf("admin with password %q: %v, want an authorization error", pw, err)
				}
			}
		},
	}})
}
