package permtest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
)

// TestPresence: a processor writes only processors' presence records and a
// worker only workers', so neither can claim to serve what the other
// does; authz lists them and writes none; a caller touches none.
func TestPresence(t *testing.T) {
	s := start(t)
	proc := s.as(t, "processor")
	worker := s.as(t, "worker")
	authz := s.as(t, "authz")
	alice := s.as(t, "alice")
	procKey := streams.ProcessorPresenceKey(domain, "p", "1")
	workerKey := streams.WorkerPresenceKey("w", "1")
	put := func(r *role, key string, rec records.Presence) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			kv, err := r.js.KeyValue(ctx, streams.BucketPresence)
			if err != nil {
				return err
			}
			body, _ := json.Marshal(rec)
			if _, err := kv.Put(ctx, key, body); err != nil {
				return err
			}
			return kv.Delete(ctx, key)
		}
	}

	runBoundaries(t, []boundary{
		{
			name: "a processor keeps its own kind's presence, not a worker's",
			allowed: func(t *testing.T) {
				proc.allowed(t, "put and delete a processor's presence", put(proc, procKey, records.Presence{Name: "p", Domains: []string{domain}}))
			},
			denied: func(t *testing.T) { deniedPut(t, s, proc, streams.BucketPresence, workerKey) },
		},
		{
			name: "a worker keeps its own kind's presence, not a processor's",
			allowed: func(t *testing.T) {
				worker.allowed(t, "put and delete a worker's presence", put(worker, workerKey, records.Presence{Name: "w", Types: []string{"x"}}))
			},
			denied: func(t *testing.T) { deniedPut(t, s, worker, streams.BucketPresence, procKey) },
		},
		{
			name: "authz lists presence but writes none",
			allowed: func(t *testing.T) {
				s.adminPut(t, streams.BucketPresence, procKey)
				authz.allowed(t, "list presence", func(ctx context.Context) error {
					kv, err := authz.js.KeyValue(ctx, streams.BucketPresence)
					if err != nil {
						return err
					}
					if _, err := streams.ListPresence(ctx, kv); err != nil {
						return fmt.Errorf("list: %w", err)
					}
					return nil
				})
			},
			denied: func(t *testing.T) {
				subj := kvSubject(streams.BucketPresence, procKey)
				s.deniedInto(t, authz, kvStream(streams.BucketPresence), subj, authz.jsPublish(subj))
			},
		},
		{
			name: "a caller writes no presence",
			allowed: func(t *testing.T) {
				alice.allowed(t, "tick", func(context.Context) error {
					if err := alice.nc.Publish(streams.TickSubject(domain), nil); err != nil {
						return err
					}
					return alice.nc.Flush()
				})
			},
			denied: func(t *testing.T) {
				for _, key := range []string{procKey, workerKey} {
					subj := kvSubject(streams.BucketPresence, key)
					s.deniedInto(t, alice, kvStream(streams.BucketPresence), subj, alice.jsPublish(subj))
				}
			},
		},
	})
}
