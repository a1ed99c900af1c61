package permtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/internal/testsystem"
	"github.com/tickflow/tickflow/pipeline"
)

// domain is the one domain every test provisions.
const domain = "payments"

const (
	// denyWait bounds the wait for the server's report of a denial. The
	// server sends it while it handles the message, so it arrives within a
	// round trip; the bound only matters when a test is failing.
	denyWait = time.Second
	// opWait bounds an operation that must succeed.
	opWait = 2 * time.Second
)

// roles lists every user of nats.conf.
var roles = []string{"admin", "authz", "processor", "worker", "ticker", "owner", "alice", "bob", "oracle"}

// suite is one server started from nats.conf with domain provisioned, and
// an admin connection to set the scene and to look at streams.
type suite struct {
	env     *testnats.Env
	adminNC *nats.Conn
	admin   jetstream.JetStream
}

func start(t *testing.T) *suite {
	t.Helper()
	sys := testsystem.Start(t, "", testsystem.Options{Domains: []string{domain}})
	return &suite{env: sys.Env, adminNC: sys.Conn(t, "admin"), admin: sys.Admin}
}

// role is a connection as one nats.conf user that collects the permission
// violations the server reports to it.
type role struct {
	env        *testnats.Env
	user       string
	nc         *nats.Conn
	js         jetstream.JetStream
	violations chan string
}

// as connects as user, with an error handler that records every permission
// violation the server reports on this connection.
func (s *suite) as(t *testing.T, user string) *role {
	t.Helper()
	r := &role{env: s.env, user: user, violations: make(chan string, 64)}
	r.nc = s.env.Conn(t, user, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case r.violations <- err.Error():
			default: // full: the test waiting for a violation fails on its own
			}
		}
	}))
	js, err := jetstream.New(r.nc)
	if err != nil {
		t.Fatal(err)
	}
	r.js = js
	return r
}

func pubViolation(subject string) string {
	return fmt.Sprintf("Permissions Violation for Publish to %q", subject)
}

func subViolation(subject string) string {
	return fmt.Sprintf("Permissions Violation for Subscription to %q", subject)
}

// wantViolation waits for the server to report the violation want to the
// role. Any other violation reported meanwhile fails the test too: each
// denial a test provokes is expected by name.
func (r *role) wantViolation(t *testing.T, want string) {
	t.Helper()
	timer := time.NewTimer(denyWait)
	defer timer.Stop()
	for {
		select {
		case v := <-r.violations:
			if strings.Contains(v, want) {
				r.env.ExpectViolation(r.user, want) // provoked: the server's log shows it too
				return
			}
			t.Errorf("%s: unexpected %q while waiting for %q", r.user, v, want)
		case <-timer.C:
			t.Errorf("%s: the server reported no %q within %s: the operation was allowed", r.user, want, denyWait)
			return
		}
	}
}

// reported drains the violations reported so far, to explain a failure.
func (r *role) reported() string {
	var out []string
	for {
		select {
		case v := <-r.violations:
			out = append(out, v)
		default:
			if len(out) == 0 {
				return ""
			}
			return " (server reported: " + strings.Join(out, "; ") + ")"
		}
	}
}

// allowed runs op, which must succeed within opWait.
func (r *role) allowed(t *testing.T, what string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opWait)
	defer cancel()
	if err := op(ctx); err != nil {
		t.Errorf("%s may %s, but: %v%s", r.user, what, err, r.reported())
	}
}

// denied runs op, a request the server must refuse: the violation naming
// subject must be reported, and op, whose context is cancelled as soon as
// it is, must fail. Cancelling early keeps a denial as fast as a round trip
// instead of a request timeout.
func (r *role) denied(t *testing.T, subject string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), denyWait)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- op(ctx) }()
	r.wantViolation(t, pubViolation(subject))
	cancel()
	if err := <-errc; err == nil {
		t.Errorf("%s: a request to %s succeeded, want it denied", r.user, subject)
	}
}

// deniedPublish core-publishes to subject, which the server must refuse.
func (r *role) deniedPublish(t *testing.T, subject string) {
	t.Helper()
	if err := r.nc.Publish(subject, []byte(r.user)); err != nil {
		t.Fatal(err)
	}
	r.wantViolation(t, pubViolation(subject))
}

// deniedSubscribe subscribes to subject, which the server must refuse.
func (r *role) deniedSubscribe(t *testing.T, subject string) {
	t.Helper()
	sub, err := r.nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	r.wantViolation(t, subViolation(subject))
	_ = sub.Unsubscribe()
}

// jsPublish is a JetStream publish of the role's name to subject; it fails
// unless a stream acknowledges it.
func (r *role) jsPublish(subject string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := r.js.Publish(ctx, subject, []byte(r.user))
		return err
	}
}

// publishesTo is a JetStream publish that must be acknowledged by stream.
func (r *role) publishesTo(stream, subject string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		ack, err := r.js.Publish(ctx, subject, []byte(r.user))
		if err != nil {
			return err
		}
		if ack.Stream != stream {
			return fmt.Errorf("acknowledged by stream %s, want %s", ack.Stream, stream)
		}
		return nil
	}
}

// request sends a core request to subject and checks the answer.
func (r *role) request(subject, wantReply string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		m, err := r.nc.RequestWithContext(ctx, subject, []byte(r.user))
		if err != nil {
			return err
		}
		if string(m.Data) != wantReply {
			return fmt.Errorf("answer %q, want %q", m.Data, wantReply)
		}
		return nil
	}
}

// msgs is the number of messages stream holds, as admin sees it.
func (s *suite) msgs(t *testing.T, stream string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opWait)
	defer cancel()
	st, err := s.admin.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("admin: stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("admin: stream %s: %v", stream, err)
	}
	return info.State.Msgs
}

// deniedInto runs a denied publish into stream and checks the stream did
// not grow.
func (s *suite) deniedInto(t *testing.T, r *role, stream, subject string, op func(ctx context.Context) error) {
	t.Helper()
	before := s.msgs(t, stream)
	r.denied(t, subject, op)
	if after := s.msgs(t, stream); after != before {
		t.Errorf("%s: stream %s grew from %d to %d messages after a denied publish to %s", r.user, stream, before, after, subject)
	}
}

// adminPublish puts a message on subject as admin and returns its stream sequence.
func (s *suite) adminPublish(t *testing.T, subject string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opWait)
	defer cancel()
	ack, err := s.admin.Publish(ctx, subject, []byte("admin"))
	if err != nil {
		t.Fatalf("admin: publish %s: %v", subject, err)
	}
	return ack.Sequence
}

// adminPut writes key of bucket as admin.
func (s *suite) adminPut(t *testing.T, bucket, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opWait)
	defer cancel()
	kv, err := s.admin.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key, []byte("admin")); err != nil {
		t.Fatalf("admin: put %s/%s: %v", bucket, key, err)
	}
}

// serveAuthz answers every authz.<user>.<op> request as authz does: with
// the caller's name, learnt from the subject the server let it publish on.
// It is a micro service, so $SRV discovery works too.
func (s *suite) serveAuthz(t *testing.T) *role {
	t.Helper()
	r := s.as(t, "authz")
	svc, err := micro.AddService(r.nc, micro.Config{Name: streams.AuthzService, Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	err = svc.AddEndpoint("requests", micro.HandlerFunc(func(req micro.Request) {
		_ = req.Respond([]byte(strings.Split(req.Subject(), ".")[1]))
	}), micro.WithEndpointSubject(streams.AuthzSubject("*", ">")))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// serveWorker answers work requests for function type "x" with "done", as
// a worker's micro service endpoint does.
func (s *suite) serveWorker(t *testing.T) *role {
	t.Helper()
	r := s.as(t, "worker")
	svc, err := micro.AddService(r.nc, micro.Config{Name: streams.WorkerService, Version: "0.0.1", QueueGroup: streams.WorkQueueGroup})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	err = svc.AddEndpoint("fn", micro.HandlerFunc(func(req micro.Request) { _ = req.Respond([]byte("done")) }),
		micro.WithEndpointSubject(streams.WorkSubject("x")))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// serveTicks answers ticks with a report, as a processor does.
func (s *suite) serveTicks(t *testing.T) *role {
	t.Helper()
	r := s.as(t, "processor")
	_, err := r.nc.QueueSubscribe(streams.TickSubject(domain), streams.TickQueueGroup(domain), func(m *nats.Msg) {
		if m.Reply != "" {
			_ = m.Respond([]byte("report"))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// boundary is one line a role must not cross: allowed proves the side the
// role may do, denied the side it may not.
type boundary struct {
	name    string
	allowed func(t *testing.T)
	denied  func(t *testing.T)
}

func runBoundaries(t *testing.T, tests []boundary) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Run("allowed", tt.allowed)
			t.Run("denied", tt.denied)
		})
	}
}

func highToken() string { return streams.TokenSubject(pipeline.High, domain) }

func medToken() string { return streams.TokenSubject(pipeline.Med, domain) }

// kvSubject is the subject a KV put of key in bucket publishes on.
func kvSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// kvStream is the stream behind bucket.
func kvStream(bucket string) string { return "KV_" + bucket }
