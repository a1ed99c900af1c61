package permtest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/keyorder"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// TestAuthz: the authorization service is the only identity that enqueues
// batches, keeps the batch records and edits the queues; it never consumes
// the processors' queues nor changes the streams themselves.
func TestAuthz(t *testing.T) {
	s := start(t)
	authz := s.serveAuthz(t)
	alice := s.as(t, "alice")
	procConsumer := streams.ProcessorConsumer(domain)

	runBoundaries(t, []boundary{
		{
			name: "enqueues new batches but does not rotate them",
			allowed: func(t *testing.T) {
				authz.allowed(t, "publish a HIGH token", authz.publishesTo(streams.StreamHigh, highToken()))
				authz.allowed(t, "publish a MED token", authz.publishesTo(streams.StreamMed, medToken()))
				authz.allowed(t, "take a batch id", authz.publishesTo(streams.StreamIDs, streams.IDsSubject))
				authz.allowed(t, "index a batch under its submitter", authz.publishesTo(streams.StreamSubmitted, streams.SubmittedSubject("alice")))
				authz.allowed(t, "read the submitter index back by sequence", func(ctx context.Context) error {
					m, err := authz.nc.RequestMsgWithContext(ctx, streams.SubmittedSeqMsg(1))
					if err != nil {
						return err
					}
					_, _, err = jsapi.ReadDirectGet(m)
					return err
				})
			},
			denied: func(t *testing.T) {
				subj := streams.RequeueSubject(pipeline.High, domain)
				s.deniedInto(t, authz, streams.StreamHigh, subj, authz.jsPublish(subj))
			},
		},
		{
			// A callback authz cannot apply (its batch record unreadable) is
			// dead-lettered, and read back from CALLBACKS to replay it; the
			// callbacks themselves stay as the processors wrote them.
			name: "relays confirmations, dead-letters callbacks, but keeps its hands off them",
			allowed: func(t *testing.T) {
				authz.allowed(t, "publish a confirmation", authz.publishesTo(streams.StreamConfirm, streams.ConfirmSubject(domain, 1, 0)))
				authz.allowed(t, "write a dead letter", authz.publishesTo(streams.StreamDLQ, streams.DLQSubject(domain)))
				seq := s.adminPublish(t, streams.CallbackSubject(domain))
				authz.allowed(t, "read a callback", func(ctx context.Context) error {
					st, err := authz.js.Stream(ctx, streams.StreamCallbacks)
					if err != nil {
						return err
					}
					_, err = st.GetMsg(ctx, seq)
					return err
				})
			},
			denied: func(t *testing.T) {
				seq := s.adminPublish(t, streams.CallbackSubject(domain))
				authz.denied(t, "$JS.API.STREAM.MSG.DELETE."+streams.StreamCallbacks, func(ctx context.Context) error {
					st, err := authz.js.Stream(ctx, streams.StreamCallbacks)
					if err != nil {
						return err
					}
					return st.DeleteMsg(ctx, seq)
				})
			},
		},
		{
			name: "keeps batch records but not the workers' results",
			allowed: func(t *testing.T) {
				authz.allowed(t, "put and get a batch record", func(ctx context.Context) error {
					kv, err := authz.js.KeyValue(ctx, streams.BucketBatches)
					if err != nil {
						return err
					}
					if _, err := kv.Put(ctx, streams.BatchKey(1), []byte("record")); err != nil {
						return err
					}
					_, err = kv.Get(ctx, streams.BatchKey(1))
					return err
				})
				authz.allowed(t, "release a sender: read and update a sender pool", func(ctx context.Context) error {
					kv, err := authz.js.KeyValue(ctx, streams.BucketSenders)
					if err != nil {
						return err
					}
					if _, err := kv.Put(ctx, domain, []byte("pool")); err != nil {
						return err
					}
					_, err = kv.Get(ctx, domain)
					return err
				})
			},
			denied: func(t *testing.T) {
				// authz may look at every stream ($JS.API.STREAM.INFO.*), so it
				// opens the bucket; the write is what is denied.
				ctx, cancel := context.WithTimeout(context.Background(), opWait)
				defer cancel()
				kv, err := authz.js.KeyValue(ctx, streams.BucketResults)
				if err != nil {
					t.Fatalf("open results: %v%s", err, authz.reported())
				}
				key := streams.ResultKey(1, 0, 0)
				s.deniedInto(t, authz, kvStream(streams.BucketResults), kvSubject(streams.BucketResults, key), func(ctx context.Context) error {
					_, err := kv.Put(ctx, key, []byte("forged"))
					return err
				})
			},
		},
		{
			name: "reads and deletes queue messages but does not delete or purge streams",
			allowed: func(t *testing.T) {
				seq := s.adminPublish(t, highToken())
				authz.allowed(t, "get and delete a message of HIGH", func(ctx context.Context) error {
					st, err := authz.js.Stream(ctx, streams.StreamHigh)
					if err != nil {
						return err
					}
					m, err := st.GetMsg(ctx, seq)
					if err != nil {
						return err
					}
					if m.Subject != highToken() {
						return fmt.Errorf("got %s, want %s", m.Subject, highToken())
					}
					return st.DeleteMsg(ctx, seq)
				})
				ctx, cancel := context.WithTimeout(context.Background(), opWait)
				defer cancel()
				st, err := s.admin.Stream(ctx, streams.StreamHigh)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := st.GetMsg(ctx, seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
					t.Errorf("message %d after authz deleted it: %v, want not found", seq, err)
				}
			},
			denied: func(t *testing.T) {
				s.adminPublish(t, highToken())
				before := s.msgs(t, streams.StreamHigh)
				authz.denied(t, "$JS.API.STREAM.DELETE."+streams.StreamHigh, func(ctx context.Context) error {
					return authz.js.DeleteStream(ctx, streams.StreamHigh)
				})
				authz.denied(t, "$JS.API.STREAM.PURGE."+streams.StreamHigh, func(ctx context.Context) error {
					st, err := authz.js.Stream(ctx, streams.StreamHigh)
					if err != nil {
						return err
					}
					return st.Purge(ctx)
				})
				if after := s.msgs(t, streams.StreamHigh); after != before {
					t.Errorf("HIGH went from %d to %d messages", before, after)
				}
			},
		},
		{
			name: "consumes callbacks but not the processors' queue",
			allowed: func(t *testing.T) {
				s.adminPublish(t, streams.CallbackSubject(domain))
				authz.allowed(t, "fetch and ack a callback", func(ctx context.Context) error {
					cons, err := authz.js.Consumer(ctx, streams.StreamCallbacks, streams.CallbacksConsumer)
					if err != nil {
						return err
					}
					m, err := cons.Next(jetstream.FetchContext(ctx))
					if err != nil {
						return err
					}
					return m.DoubleAck(ctx)
				})
			},
			denied: func(t *testing.T) {
				s.adminPublish(t, highToken())
				ctx, cancel := context.WithTimeout(context.Background(), opWait)
				defer cancel()
				// Looking at the processors' consumer is allowed; taking from it is not.
				cons, err := authz.js.Consumer(ctx, streams.StreamHigh, procConsumer)
				if err != nil {
					t.Fatalf("authz may read consumer info: %v%s", err, authz.reported())
				}
				before := s.msgs(t, streams.StreamHigh)
				authz.denied(t, "$JS.API.CONSUMER.MSG.NEXT."+streams.StreamHigh+"."+procConsumer, func(ctx context.Context) error {
					_, err := cons.Next(jetstream.FetchContext(ctx))
					return err
				})
				info, err := cons.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if info.NumAckPending != 0 || info.Delivered.Consumer != 0 {
					t.Errorf("the processors' consumer delivered to authz: %+v", info.Delivered)
				}
				if after := s.msgs(t, streams.StreamHigh); after != before {
					t.Errorf("HIGH went from %d to %d messages", before, after)
				}
				authz.denied(t, "$JS.API.CONSUMER.CREATE."+streams.StreamHigh+".authz."+streams.TokenSubject(pipeline.High, domain), func(ctx context.Context) error {
					_, err := authz.js.CreateConsumer(ctx, streams.StreamHigh, jetstream.ConsumerConfig{
						Durable: "authz", FilterSubject: streams.TokenSubject(pipeline.High, domain), AckPolicy: jetstream.AckExplicitPolicy,
					})
					return err
				})
			},
		},
		{
			// Only authz keeps each key's order of waiting batches: a
			// processor that could write it could run a key's batches out of turn.
			name: "keeps and lists each key's order, which a processor cannot write",
			allowed: func(t *testing.T) {
				authz.allowed(t, "append to and list a key's order", func(ctx context.Context) error {
					kv, err := authz.js.KeyValue(ctx, streams.BucketKeys)
					if err != nil {
						return err
					}
					keys := keyorder.New(kv, nil)
					if _, _, err := keys.Append(ctx, domain, "k", 1); err != nil {
						return err
					}
					qs, err := keys.List(ctx, domain)
					if err != nil {
						return err
					}
					if len(qs) != 1 || qs[0].Head() != 1 {
						return fmt.Errorf("listed %+v, want key k with batch 1", qs)
					}
					return nil
				})
			},
			denied: func(t *testing.T) {
				proc := s.as(t, "processor")
				subj := kvSubject(streams.BucketKeys, streams.KeyQueueKey(domain, "k"))
				s.deniedInto(t, proc, kvStream(streams.BucketKeys), subj, proc.jsPublish(subj))
			},
		},
		{
			name: "serves callers but cannot listen as a worker or a processor",
			allowed: func(t *testing.T) {
				alice.allowed(t, "be answered by authz", alice.request(streams.AuthzSubject("alice", api.OpSend), "alice"))
			},
			denied: func(t *testing.T) {
				authz.deniedSubscribe(t, "work.>")
				authz.deniedSubscribe(t, streams.TickSubject(domain))
			},
		},
	})
}
