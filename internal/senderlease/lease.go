package senderlease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
)

// Lease names a lease to take: the batch, its key, its submitter
// and the replica, and the submitter's share of the pool.
type Lease struct {
	Domain    string
	Batch     uint64
	Key       string
	Processor string
	Submitter string
	// Share is the most senders of the pool that batches of Submitter may
	// hold at once; 0: no bound.
	Share int
}

// Acquire leases a free sender among names to the batch, or returns
// the one the batch holds already (whoever leased it, before whatever
// crash). Names missing from the pool record are added as free. With every
// sender of names leased to other batches it returns ErrNoSender; with
// l.Share of them leased to l.Submitter's other batches, ErrShare.
// Either way nothing is written and the batch may ask again later.
func Acquire(ctx context.Context, kv jetstream.KeyValue, l Lease, names []string, now time.Time) (string, error) {
	if len(names) == 0 {
		return "", fmt.Errorf("%w: domain %s has no senders configured", ErrNoSender, l.Domain)
	}
	var got string
	_, err := streams.UpdateKV(ctx, kv, l.Domain, func(cur []byte, exists bool) ([]byte, error) {
		got = ""
		pool, err := decodePool(cur, exists, l.Domain)
		if err != nil {
			return nil, err
		}
		for _, s := range pool.Senders {
			if s.Batch == l.Batch {
				got = s.Name
				return nil, nil // held already: nothing to write
			}
		}
		for _, n := range names {
			if !slices.ContainsFunc(pool.Senders, func(s records.Sender) bool { return s.Name == n }) {
				pool.Senders = append(pool.Senders, records.Sender{Name: n, Since: now.UTC()})
			}
		}
		// The sender free the longest goes first, so leases spread.
		pick := -1
		for i, s := range pool.Senders {
			if s.Free() && slices.Contains(names, s.Name) && (pick < 0 || s.Since.Before(pool.Senders[pick].Since)) {
				pick = i
			}
		}
		if pick < 0 {
			return nil, ErrNoSender
		}
		if l.Share > 0 {
			held := 0
			for _, s := range pool.Senders {
				if !s.Free() && s.Submitter == l.Submitter && slices.Contains(names, s.Name) {
					held++
				}
			}
			if held >= l.Share {
				return nil, fmt.Errorf("%w: %d of the %d senders of %s", ErrShare, held, len(names), l.Domain)
			}
		}
		pool.Senders[pick] = records.Sender{Name: pool.Senders[pick].Name, Batch: l.Batch, Key: l.Key, Since: now.UTC(), Processor: l.Processor, Submitter: l.Submitter}
		got = pool.Senders[pick].Name
		return records.Encode(&pool)
	})
	if err != nil {
		return "", err
	}
	return got, nil
}

// Release frees the sender batch holds in domain's pool, if any, and
// returns its name ("" when the batch held none). It is idempotent.
func Release(ctx context.Context, kv jetstream.KeyValue, domain string, batch uint64, now time.Time) (string, error) {
	var freed string
	_, err := streams.UpdateKV(ctx, kv, domain, func(cur []byte, exists bool) ([]byte, error) {
		freed = ""
		if !exists {
			return nil, nil
		}
		pool, err := decodePool(cur, exists, domain)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(pool.Senders, func(s records.Sender) bool { return s.Batch == batch })
		if i < 0 {
			return nil, nil
		}
		freed = pool.Senders[i].Name
		pool.Senders[i] = records.Sender{Name: freed, Since: now.UTC()}
		return records.Encode(&pool)
	})
	if err != nil {
		return "", err
	}
	return freed, nil
}

// Load reads domain's sender pool; a domain without one has an
// empty pool.
func Load(ctx context.Context, kv jetstream.KeyValue, domain string) (records.SenderPool, error) {
	e, err := kv.Get(ctx, domain)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return records.SenderPool{Domain: domain}, nil
	}
	if err != nil {
		return records.SenderPool{}, fmt.Errorf("senderlease: read the sender pool of %s: %w", domain, err)
	}
	return decodePool(e.Value(), true, domain)
}

func decodePool(cur []byte, exists bool, domain string) (records.SenderPool, error) {
	if !exists {
		return records.SenderPool{Domain: domain}, nil
	}
	pool, err := records.Decode[records.SenderPool](cur)
	if err != nil {
		return records.SenderPool{}, fmt.Errorf("senderlease: the sender pool of %s: %w", domain, err)
	}
	return pool, nil
}
