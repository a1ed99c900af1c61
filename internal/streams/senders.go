package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/pipeline"
)

// A domain's sender pool is one record of the senders bucket, key
// "<domain>": every sender the processors were configured with, free or
// leased to one batch. Every lease and release is one compare-and-set of
// that record (UpdateKV), so a sender is never leased twice, a batch finds
// its lease again by its id after any crash, and a release is idempotent.
// Pools are small (a handful of accounts) and a lease changes twice per
// batch, so one record per domain is no hot spot worth splitting. Each
// lease names its batch's submitter, so the compare-and-set that grants a
// lease also keeps each submitter to its share of the pool
// (SenderLease.Share): one submitter's batches never hold every sender.

// SenderPool is the value of a domain's key in the senders bucket.
type SenderPool struct {
	V       uint8    `msgpack:"v" json:"v"`
	Domain  string   `msgpack:"domain" json:"domain"`
	Senders []Sender `msgpack:"senders" json:"senders"`
}

// Sender is one sender of a pool and its lease. It holds the sender's name
// only: its secret stays in the workers' configuration.
type Sender struct {
	Name string `msgpack:"name" json:"name"`
	// Batch is the batch holding the sender; 0 when it is free.
	Batch uint64 `msgpack:"batch,omitempty" json:"batch,omitempty"`
	// Key is the holding batch's key; empty for an unkeyed batch.
	Key string `msgpack:"key,omitempty" json:"key,omitempty"`
	// Since is when the sender was leased, or freed.
	Since time.Time `msgpack:"since" json:"since"`
	// Processor is the replica that leased it.
	Processor string `msgpack:"processor,omitempty" json:"processor,omitempty"`
	// Submitter is who submitted the holding batch; it counts against
	// that submitter's share of the pool.
	Submitter string `msgpack:"submitter,omitempty" json:"submitter,omitempty"`
}

// Free reports whether no batch holds the sender.
func (s *Sender) Free() bool { return s.Batch == 0 }

// Holder is what the sender is bound to: the batch's key, or "batch <id>"
// for an unkeyed batch; empty when free.
func (s *Sender) Holder() string {
	switch {
	case s.Free():
		return ""
	case s.Key != "":
		return s.Key
	}
	return "batch " + strconv.FormatUint(s.Batch, 10)
}

func (p *SenderPool) version() uint8 { return p.V }
func (p *SenderPool) setVersion()    { p.V = WireVersion }

// ErrNoSender is returned by AcquireSender when every sender of the pool
// is leased to another batch.
var ErrNoSender = errors.New("streams: every sender is leased")

// SenderLease names a lease to take: the batch, its key, its submitter
// and the replica, and the submitter's share of the pool.
type SenderLease struct {
	Domain    string
	Batch     uint64
	Key       string
	Processor string
	Submitter string
	// Share is the most senders of the pool that batches of Submitter may
	// hold at once; 0: no bound.
	Share int
}

// AcquireSender leases a free sender among names to the batch, or returns
// the one the batch holds already (whoever leased it, before whatever
// crash). Names missing from the pool record are added as free. With every
// sender of names leased to other batches it returns ErrNoSender; with
// l.Share of them leased to l.Submitter's other batches, ErrSenderShare.
// Either way nothing is written and the batch may ask again later.
func AcquireSender(ctx context.Context, kv jetstream.KeyValue, l SenderLease, names []string, now time.Time) (string, error) {
	if len(names) == 0 {
		return "", fmt.Errorf("%w: domain %s has no senders configured", ErrNoSender, l.Domain)
	}
	var got string
	_, err := UpdateKV(ctx, kv, l.Domain, func(cur []byte, exists bool) ([]byte, error) {
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
			if !slices.ContainsFunc(pool.Senders, func(s Sender) bool { return s.Name == n }) {
				pool.Senders = append(pool.Senders, Sender{Name: n, Since: now.UTC()})
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
				return nil, fmt.Errorf("%w: %d of the %d senders of %s", ErrSenderShare, held, len(names), l.Domain)
			}
		}
		pool.Senders[pick] = Sender{Name: pool.Senders[pick].Name, Batch: l.Batch, Key: l.Key, Since: now.UTC(), Processor: l.Processor, Submitter: l.Submitter}
		got = pool.Senders[pick].Name
		return Encode(&pool)
	})
	if err != nil {
		return "", err
	}
	return got, nil
}

// ReleaseSender frees the sender batch holds in domain's pool, if any, and
// returns its name ("" when the batch held none). It is idempotent.
func ReleaseSender(ctx context.Context, kv jetstream.KeyValue, domain string, batch uint64, now time.Time) (string, error) {
	var freed string
	_, err := UpdateKV(ctx, kv, domain, func(cur []byte, exists bool) ([]byte, error) {
		freed = ""
		if !exists {
			return nil, nil
		}
		pool, err := decodePool(cur, exists, domain)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(pool.Senders, func(s Sender) bool { return s.Batch == batch })
		if i < 0 {
			return nil, nil
		}
		freed = pool.Senders[i].Name
		pool.Senders[i] = Sender{Name: freed, Since: now.UTC()}
		return Encode(&pool)
	})
	if err != nil {
		return "", err
	}
	return freed, nil
}

// LoadSenders reads domain's sender pool; a domain without one has an
// empty pool.
func LoadSenders(ctx context.Context, kv jetstream.KeyValue, domain string) (SenderPool, error) {
	e, err := kv.Get(ctx, domain)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return SenderPool{Domain: domain}, nil
	}
	if err != nil {
		return SenderPool{}, fmt.Errorf("streams: read the sender pool of %s: %w", domain, err)
	}
	return decodePool(e.Value(), true, domain)
}

func decodePool(cur []byte, exists bool, domain string) (SenderPool, error) {
	if !exists {
		return SenderPool{Domain: domain}, nil
	}
	pool, err := Decode[SenderPool](cur)
	if err != nil {
		return SenderPool{}, fmt.Errorf("streams: the sender pool of %s: %w", domain, err)
	}
	return pool, nil
}

// InclusionCall is the part of a work request about a function waiting for
// inclusion: a poll asks about Ref; a hook request names the hook.
type InclusionCall struct {
	// Ref is what the function dispatched (pipeline.Result.Ref).
	Ref string `msgpack:"ref,omitempty"`
	// Hook is HookSuccess or HookFailure on a hook request, empty on a poll.
	Hook string `msgpack:"hook,omitempty"`
	// Output is the function's result, for the success hook.
	Output *pipeline.Output `msgpack:"output,omitempty"`
}

// The hooks of a function waiting for inclusion.
const (
	HookSuccess = "success"
	HookFailure = "failure"
)

// PollSubject is the worker endpoint polling the inclusion of type typ.
func PollSubject(typ string) string { return "work.poll." + typ }

// HookSubject is the worker endpoint calling the success and failure hooks
// of type typ.
func HookSubject(typ string) string { return "work.hook." + typ }

// HookResultKey is the results-bucket key recording that hook ran for
// function index of batch id: once per function, whatever its rounds.
func HookResultKey(id uint64, index int, hook string) string {
	return strconv.FormatUint(id, 10) + "." + strconv.Itoa(index) + ".hook-" + hook
}
