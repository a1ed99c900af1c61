package streams

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
)

// A finished batch's records expire on their own: the last write of each
// (the terminal batch record, the done progress record, the submitter's
// index key and the idempotency key rewritten then) carries a per-message
// TTL, and the server removes it when it runs out. No sweeper writes a
// delete per batch, and nothing else is written for it: a batch costs
// only the index and idempotency keys' rewrites. The time to live is
// provisioned with the buckets (their stream's metadata), so every writer
// reads the same one at its start.

// Metadata keys of the batches and progress buckets' streams.
const (
	// MetaFinishedMaxAge holds Settings.FinishedMaxAge in seconds.
	MetaFinishedMaxAge = "tickflow_finished_max_age_s"
	// MetaDeadLetterMaxAge holds Settings.DLQMaxAge in seconds.
	MetaDeadLetterMaxAge = "tickflow_dead_letter_max_age_s"
)

// Retention says how long a finished batch's records are kept, as
// provisioned on its bucket (ReadRetention). The zero value keeps them
// for ever: a bucket provisioned by a version without retention, whose
// stream does not take a per-message TTL.
type Retention struct {
	// Finished is how long after it finished a batch's records are kept.
	Finished time.Duration
	// DeadLetter is how long a dead letter is kept: a batch with one
	// keeps its record that long, if it is longer than Finished.
	DeadLetter time.Duration
}

// Enabled says whether records expire.
func (r Retention) Enabled() bool { return r.Finished > 0 }

// Age is how long after it finished a batch's records are kept: Finished,
// or DeadLetter for a batch with a dead letter if that is longer.
func (r Retention) Age(deadLetter bool) time.Duration {
	if deadLetter && r.DeadLetter > r.Finished {
		return r.DeadLetter
	}
	return r.Finished
}

// TTL is the time to live of a record of a batch that finished at
// finished, written at now: what is left of its age, at least the
// server's minimum of one second; 0 when records do not expire.
func (r Retention) TTL(finished, now time.Time, deadLetter bool) time.Duration {
	if !r.Enabled() {
		return 0
	}
	left := r.Age(deadLetter)
	if !finished.IsZero() {
		left -= now.Sub(finished)
	}
	return max(left, MinTTL)
}

// MinTTL is the shortest per-message TTL the server takes.
const MinTTL = time.Second

// retained marks c as a bucket of records that expire after their batch
// finished: its metadata carries the retention.
func (s Settings) retained(c jetstream.KeyValueConfig) jetstream.KeyValueConfig {
	c.Metadata = map[string]string{
		MetaFinishedMaxAge:   strconv.FormatInt(int64(s.FinishedMaxAge.Seconds()), 10),
		MetaDeadLetterMaxAge: strconv.FormatInt(int64(s.DLQMaxAge.Seconds()), 10),
	}
	return c
}

// SubmittedMaxAge is how long an entry of the submitter index is kept
// after it was written, at the batches' submission: FinishedMaxAge, plus
// as long again (at least a minute) for the batches to run. An entry names
// up to 64 batches by id and holds nothing else of them; a batch that is
// still unfinished when its entry expires drops out of its submitter's
// listing (not out of batch or inflight), and the listing leaves out the
// ids whose records expired before their entry. It is never shorter than
// the stream's duplicate window, which the server requires.
func (s Settings) SubmittedMaxAge() time.Duration {
	return max(s.FinishedMaxAge+max(s.FinishedMaxAge, time.Minute), s.DuplicateWindow)
}

// resultsAge is how long completion records and runs are kept after their
// last write: ResultsMaxAge, or FinishedMaxAge if that is shorter but not
// below an hour. A completion record is what answers a token that comes
// back after a crash or an outage without running its function again, so
// it outlives the redelivery of any token of its batch by a wide margin.
func (s Settings) resultsAge() time.Duration {
	return min(s.ResultsMaxAge, max(s.FinishedMaxAge, MinResultsAge))
}

// MinResultsAge is the shortest age of the results and runs buckets: a
// worker's claim, and a released one's marker, live that long at most.
const MinResultsAge = time.Hour

// MetaRecordTTL, on the results bucket's stream, holds RecordTTL in
// seconds: the time to live a worker gives every completion record it
// writes.
const MetaRecordTTL = "tickflow_record_ttl_s"

// RecordTTL is how long a worker's completion record is kept after it was
// written: FinishedMaxAge, the age of a finished batch's other records,
// but at least AckWait + DuplicateWindow, and at most ResultsMaxAge.
//
// A record answers a call repeated before the batch's progress recorded
// it: a lost reply, a processor that died (its token comes back after
// AckWait), a server restart. Once progress moved past the function the
// record is never read again, except for a batch that finished at its
// first step: it writes no progress, and its record answers a token
// that comes back after its callback, as a done progress record
// (FinishedMaxAge) answers the others'. The floor keeps a record past
// the token's redelivery whatever FinishedMaxAge is, and past the
// duplicate window within which the callback repeated is dropped.
// Claims are not records: they keep the bucket's age (resultsAge), so
// no claim expires under a running call.
func (s Settings) RecordTTL() time.Duration {
	return min(s.ResultsMaxAge, max(s.FinishedMaxAge, s.AckWait+s.DuplicateWindow))
}

// recordsExpire marks c, the results bucket, as one whose completion
// records carry a time to live: its metadata holds RecordTTL.
func (s Settings) recordsExpire(c jetstream.KeyValueConfig) jetstream.KeyValueConfig {
	c.Metadata = map[string]string{MetaRecordTTL: strconv.FormatInt(int64((s.RecordTTL()+time.Second-1)/time.Second), 10)}
	return c
}

// ReadRecordTTL reads the time to live of a completion record provisioned
// on the results bucket kv; 0 (none) on a bucket provisioned by a
// version without one, whose stream takes no per-message TTL.
func ReadRecordTTL(ctx context.Context, kv jetstream.KeyValue) (time.Duration, error) {
	cfg, err := bucketConfig(ctx, kv)
	if err != nil || cfg == nil {
		return 0, err
	}
	n, err := strconv.ParseInt(cfg.Metadata[MetaRecordTTL], 10, 64)
	if err != nil || n <= 0 {
		return 0, nil
	}
	return time.Duration(n) * time.Second, nil
}

// bucketConfig is the configuration of bucket kv's stream, if it allows a
// per-message TTL; nil if not.
func bucketConfig(ctx context.Context, kv jetstream.KeyValue) (*jetstream.StreamConfig, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("streams: read the retention of bucket %s: %w", kv.Bucket(), err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil || !bs.StreamInfo().Config.AllowMsgTTL {
		return nil, nil
	}
	cfg := bs.StreamInfo().Config
	return &cfg, nil
}

// KVStreamConfig is the stream of KV bucket c, as jetstream would make it,
// with per-message TTLs allowed and no marker left at an expiry. The
// server lets an existing stream turn AllowMsgTTL on (never off), so an
// older deployment's bucket is upgraded in place by provisioning.
func KVStreamConfig(c jetstream.KeyValueConfig) jetstream.StreamConfig {
	history := int64(max(c.History, 1))
	dup := 2 * time.Minute
	if c.TTL > 0 && c.TTL < dup {
		dup = c.TTL
	}
	return jetstream.StreamConfig{
		Name:              "KV_" + c.Bucket,
		Description:       c.Description,
		Subjects:          []string{"$KV." + c.Bucket + ".>"},
		MaxMsgsPerSubject: history,
		MaxBytes:          -1,
		MaxAge:            c.TTL,
		MaxMsgSize:        -1,
		Storage:           c.Storage,
		Replicas:          max(c.Replicas, 1),
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        dup,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		AllowDirect:       true,
		Discard:           jetstream.DiscardNew,
		AllowMsgTTL:       true,
		Metadata:          c.Metadata,
	}
}

// ReadRetention reads the retention provisioned on bucket kv (the batches
// or progress bucket); a bucket without one gives the zero Retention.
func ReadRetention(ctx context.Context, kv jetstream.KeyValue) (Retention, error) {
	cfg, err := bucketConfig(ctx, kv)
	if err != nil || cfg == nil {
		return Retention{}, err
	}
	secs := func(k string) time.Duration {
		n, err := strconv.ParseInt(cfg.Metadata[k], 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	return Retention{Finished: secs(MetaFinishedMaxAge), DeadLetter: secs(MetaDeadLetterMaxAge)}, nil
}

// TTLValue is the Nats-TTL header value of ttl, in whole seconds rounded
// up, at least MinTTL.
func TTLValue(ttl time.Duration) string {
	s := int64((max(ttl, MinTTL) + time.Second - 1) / time.Second)
	return strconv.FormatInt(s, 10) + "s"
}

// SetTTL sets m's time to live, ttl > 0; the stream must allow it.
func SetTTL(m *nats.Msg, ttl time.Duration) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(jetstream.MsgTTLHeader, TTLValue(ttl))
}

// KeyTTLMsg is the write of key of KV bucket bucket with value and a time
// to live, whatever is there: for a publisher that awaits its PubAck
// itself (PutKeyTTL publishes it through js).
func KeyTTLMsg(bucket, key string, value []byte, ttl time.Duration) *nats.Msg {
	m := nats.NewMsg("$KV." + bucket + "." + key)
	m.Data = value
	SetTTL(m, ttl)
	return m
}

// PutKeyTTL writes key of KV bucket bucket with a time to live, through
// js: kv.Put and kv.Update cannot carry one, and a key's last write
// decides when it goes. rev > 0 writes with compare-and-set on that
// revision (a lost race matches ErrConflict); rev 0 writes whatever is
// there.
func PutKeyTTL(ctx context.Context, js jetstream.JetStream, bucket, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	m := KeyTTLMsg(bucket, key, value, ttl)
	if rev > 0 {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	}
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		if jsapi.IsRevisionConflict(err) {
			return 0, fmt.Errorf("%w: %s: %w", ErrConflict, key, err)
		}
		return 0, fmt.Errorf("streams: write %s of bucket %s: %w", key, bucket, err)
	}
	return ack.Sequence, nil
}
