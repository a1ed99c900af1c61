package permtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/streams"
)

// TestAuthzAnswersFlowControl: authz lists the keys of the batches bucket
// (a submitter's index) and watches the keys bucket (each key's order),
// both through ordered consumers, which the server paces with flow control
// requests that authz must answer on $JS.FC.<stream>.>. A listing larger
// than the server's flow control window completes, and the server denies
// nothing (the server-log check of testnats fails the test otherwise).
//
// The right to answer must be granted outright: allow_responses covers a
// flow control request's reply subject, but when a listing stalls the
// server asks again with an idle heartbeat that names the subject in its
// Nats-Consumer-Stalled header, not as its reply, and the client's answer
// to that was denied. An answer to no pending request is one the server
// ignores, so authz sends one of those to prove the grant.
func TestAuthzAnswersFlowControl(t *testing.T) {
	s := start(t)
	authz := s.as(t, "authz")
	// Over the server's window (2 MiB at first), so the server asks for
	// flow control replies before it delivers the rest.
	const keys, size = 128, 32 << 10
	value := []byte(strings.Repeat("v", size))
	for _, tc := range []struct {
		name, bucket string
		key          func(i int) string
		list         func(ctx context.Context, kv jetstream.KeyValue) (int, error)
	}{
		{name: "a submitter's index", bucket: streams.BucketBatches, key: func(i int) string { return fmt.Sprintf("by.alice.%d", i) },
			list: func(ctx context.Context, kv jetstream.KeyValue) (int, error) {
				w, err := kv.WatchFiltered(ctx, []string{"by.alice.*"})
				return count(w, err)
			}},
		{name: "each key's order", bucket: streams.BucketKeys, key: func(i int) string { return fmt.Sprintf("%s.k%d", domain, i) },
			list: func(ctx context.Context, kv jetstream.KeyValue) (int, error) {
				w, err := kv.WatchFiltered(ctx, []string{streams.KeyQueueFilter(domain)}, jetstream.IgnoreDeletes())
				return count(w, err)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			admin, err := s.admin.KeyValue(ctx, tc.bucket)
			if err != nil {
				t.Fatal(err)
			}
			for i := range keys {
				if _, err := admin.Put(ctx, tc.key(i), value); err != nil {
					t.Fatal(err)
				}
			}
			authz.allowed(t, "list "+tc.name+" past flow control", func(context.Context) error {
				kv, err := authz.js.KeyValue(ctx, tc.bucket)
				if err != nil {
					return err
				}
				n, err := tc.list(ctx, kv)
				if err == nil && n != keys {
					err = fmt.Errorf("listed %d keys, want %d", n, keys)
				}
				return err
			})
			// nats-server's flow control subject: $JS.FC.<stream>.<consumer>.<random>.
			if err := authz.nc.Publish("$JS.FC."+kvStream(tc.bucket)+".consumer.abcd", nil); err != nil {
				t.Fatal(err)
			}
			if err := authz.nc.Flush(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// count reads a watch's initial values, up to the nil that ends them.
func count(w jetstream.KeyWatcher, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	defer func() { _ = w.Stop() }()
	n := 0
	for e := range w.Updates() {
		if e == nil {
			return n, nil
		}
		n++
	}
	return n, fmt.Errorf("the watch ended after %d keys", n)
}
