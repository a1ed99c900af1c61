package permtest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// fetchAndAck takes the next message of the processors' consumer on stream
// and acknowledges it, waiting for the server to confirm the ack.
func fetchAndAck(r *role, stream, wantSubject string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		cons, err := r.js.Consumer(ctx, stream, streams.ProcessorConsumer(domain))
		if err != nil {
			return err
		}
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			return err
		}
		if m.Subject() != wantSubject {
			return fmt.Errorf("fetched %s, want %s", m.Subject(), wantSubject)
		}
		return m.DoubleAck(ctx)
	}
}

// TestProcessor: processors consume their queues and confirmations, rotate
// batches, keep progress and locks, call workers, and publish callbacks and
// dead letters; they read but never write batch records and domain state,
// never enqueue new batches, and never change streams or consumers.
func TestProcessor(t *testing.T) {
	s := start(t)
	proc := s.as(t, "processor")
	s.serveWorker(t)
	ticker := s.as(t, "ticker")

	runBoundaries(t, []boundary{
		{
			name: "consumes its queues but does not enqueue new batches",
			allowed: func(t *testing.T) {
				s.adminPublish(t, highToken())
				s.adminPublish(t, medToken())
				proc.allowed(t, "fetch and ack from HIGH", fetchAndAck(proc, streams.StreamHigh, highToken()))
				proc.allowed(t, "fetch and ack from MED", fetchAndAck(proc, streams.StreamMed, medToken()))
				proc.allowed(t, "fetch nothing more from HIGH without waiting", func(ctx context.Context) error {
					cons, err := proc.js.Consumer(ctx, streams.StreamHigh, streams.ProcessorConsumer(domain))
					if err != nil {
						return err
					}
					b, err := cons.FetchNoWait(1)
					if err != nil {
						return err
					}
					for m := range b.Messages() {
						return fmt.Errorf("HIGH still held %s after the ack", m.Subject())
					}
					return b.Error()
				})
			},
			denied: func(t *testing.T) {
				s.deniedInto(t, proc, streams.StreamHigh, highToken(), proc.jsPublish(highToken()))
				s.deniedInto(t, proc, streams.StreamMed, medToken(), proc.jsPublish(medToken()))
			},
		},
		{
			name: "consumes confirmations but creates no consumers",
			allowed: func(t *testing.T) {
				subj := streams.ConfirmSubject(domain, 1, 0)
				s.adminPublish(t, subj)
				proc.allowed(t, "fetch and ack from CONFIRM", fetchAndAck(proc, streams.StreamConfirm, subj))
			},
			denied: func(t *testing.T) {
				filter := streams.TokenSubject(pipeline.High, domain)
				proc.denied(t, "$JS.API.CONSUMER.CREATE."+streams.StreamHigh+".rogue."+filter, func(ctx context.Context) error {
					_, err := proc.js.CreateConsumer(ctx, streams.StreamHigh, jetstream.ConsumerConfig{
						Durable: "rogue", FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy,
					})
					return err
				})
				ctx, cancel := context.WithTimeout(context.Background(), opWait)
				defer cancel()
				if _, err := s.admin.Consumer(ctx, streams.StreamHigh, "rogue"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
					t.Errorf("consumer rogue after a denied create: %v, want not found", err)
				}
			},
		},
		{
			name: "rotates, calls back and dead-letters but deletes no streams",
			allowed: func(t *testing.T) {
				proc.allowed(t, "requeue a batch", proc.publishesTo(streams.StreamHigh, streams.RequeueSubject(pipeline.High, domain)))
				proc.allowed(t, "publish a callback", proc.publishesTo(streams.StreamCallbacks, streams.CallbackSubject(domain)))
				proc.allowed(t, "publish a dead letter", proc.publishesTo(streams.StreamDLQ, streams.DLQSubject(domain)))
			},
			denied: func(t *testing.T) {
				for _, name := range []string{streams.StreamHigh, streams.StreamDLQ} {
					proc.denied(t, "$JS.API.STREAM.DELETE."+name, func(ctx context.Context) error {
						return proc.js.DeleteStream(ctx, name)
					})
					ctx, cancel := context.WithTimeout(context.Background(), opWait)
					if _, err := s.admin.Stream(ctx, name); err != nil {
						t.Errorf("stream %s after a denied delete: %v", name, err)
					}
					cancel()
				}
			},
		},
		{
			name: "keeps progress and locks but does not write batch records",
			allowed: func(t *testing.T) {
				proc.allowed(t, "create, get and update progress", func(ctx context.Context) error {
					return createGetUpdate(ctx, proc.js, streams.BucketProgress, streams.ProgressKey(domain, 1))
				})
				proc.allowed(t, "create, get, update and delete a lock", func(ctx context.Context) error {
					key := streams.LockKey(domain, "acct-1")
					if err := createGetUpdate(ctx, proc.js, streams.BucketLocks, key); err != nil {
						return err
					}
					kv, err := proc.js.KeyValue(ctx, streams.BucketLocks)
					if err != nil {
						return err
					}
					return kv.Delete(ctx, key)
				})
				proc.allowed(t, "create, get and update a sender pool", func(ctx context.Context) error {
					return createGetUpdate(ctx, proc.js, streams.BucketSenders, domain)
				})
				s.adminPut(t, streams.BucketBatches, streams.BatchKey(7))
				proc.allowed(t, "get a batch record", getKey(proc, streams.BucketBatches, streams.BatchKey(7)))
			},
			denied: func(t *testing.T) {
				deniedPut(t, s, proc, streams.BucketBatches, streams.BatchKey(7))
			},
		},
		{
			name: "reads but does not write the domain's paused state",
			allowed: func(t *testing.T) {
				s.adminPut(t, streams.BucketDomainStates, domain)
				proc.allowed(t, "get the domain state", getKey(proc, streams.BucketDomainStates, domain))
			},
			denied: func(t *testing.T) {
				deniedPut(t, s, proc, streams.BucketDomainStates, domain)
			},
		},
		{
			name: "retires a token by sequence but does not read queues",
			allowed: func(t *testing.T) {
				seq := s.adminPublish(t, highToken())
				proc.allowed(t, "delete a message of HIGH", func(ctx context.Context) error {
					st, err := proc.js.Stream(ctx, streams.StreamHigh)
					if err != nil {
						return err
					}
					return st.DeleteMsg(ctx, seq)
				})
			},
			denied: func(t *testing.T) {
				seq := s.adminPublish(t, highToken())
				ctx, cancel := context.WithTimeout(context.Background(), opWait)
				defer cancel()
				st, err := proc.js.Stream(ctx, streams.StreamHigh)
				if err != nil {
					t.Fatalf("stream info: %v%s", err, proc.reported())
				}
				proc.denied(t, "$JS.API.DIRECT.GET."+streams.StreamHigh, func(ctx context.Context) error {
					_, err := st.GetMsg(ctx, seq)
					return err
				})
			},
		},
		{
			name: "calls workers but cannot serve as one",
			allowed: func(t *testing.T) {
				proc.allowed(t, "request work from a worker", proc.request(streams.WorkSubject("x"), "done"))
			},
			denied: func(t *testing.T) {
				proc.deniedSubscribe(t, "work.>")
				proc.deniedSubscribe(t, streams.WorkSubject("x"))
			},
		},
		{
			name: "receives ticks but cannot listen as authz",
			allowed: func(t *testing.T) {
				ticks := make(chan *nats.Msg, 1)
				sub, err := proc.nc.ChanQueueSubscribe(streams.TickSubject(domain), streams.TickQueueGroup(domain), ticks)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = sub.Unsubscribe() }()
				if err := proc.nc.Flush(); err != nil {
					t.Fatal(err)
				}
				if err := ticker.nc.Publish(streams.TickSubject(domain), []byte("1")); err != nil {
					t.Fatal(err)
				}
				if _, ok := testnats.Receive(ticks, opWait); !ok {
					t.Fatalf("processor received no tick%s", proc.reported())
				}
			},
			denied: func(t *testing.T) {
				proc.deniedSubscribe(t, streams.AuthzSubject("*", ">"))
				proc.deniedSubscribe(t, streams.AuthzSubject("alice", api.OpSend))
			},
		},
	})
}

// createGetUpdate creates key in bucket, reads it and updates it at its revision.
func createGetUpdate(ctx context.Context, js jetstream.JetStream, bucket, key string) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return err
	}
	rev, err := kv.Create(ctx, key, []byte("v1"))
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if string(e.Value()) != "v1" || e.Revision() != rev {
		return fmt.Errorf("get: %q at %d, want v1 at %d", e.Value(), e.Revision(), rev)
	}
	if _, err := kv.Update(ctx, key, []byte("v2"), rev); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	return nil
}

// getKey reads key of bucket.
func getKey(r *role, bucket, key string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		kv, err := r.js.KeyValue(ctx, bucket)
		if err != nil {
			return err
		}
		_, err = kv.Get(ctx, key)
		return err
	}
}

// deniedPut opens bucket as r, which r may, and puts key, which r may not;
// the bucket must not change.
func deniedPut(t *testing.T, s *suite, r *role, bucket, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opWait)
	defer cancel()
	kv, err := r.js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("%s: open %s: %v%s", r.user, bucket, err, r.reported())
	}
	s.deniedInto(t, r, kvStream(bucket), kvSubject(bucket, key), func(ctx context.Context) error {
		_, err := kv.Put(ctx, key, []byte("forged"))
		return err
	})
}
