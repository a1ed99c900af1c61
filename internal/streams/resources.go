package streams

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/pipeline"
)

// Settings size the JetStream resources. The zero value is invalid; start
// from DefaultSettings.
type Settings struct {
	// Replicas per stream and bucket: 1 on one machine, 3 on a cluster.
	Replicas int
	// Memory selects memory storage instead of file storage.
	Memory bool
	// DuplicateWindow is how long the queue and callback streams remember
	// Nats-Msg-Id values. Default 2m.
	DuplicateWindow time.Duration
	// CallbackMaxAge is how long a callback authz has not applied is kept;
	// an applied one is removed at once. Default 7 days.
	CallbackMaxAge time.Duration
	// DLQMaxAge is how long dead letters are kept. Default 30 days.
	DLQMaxAge time.Duration
	// ResultsMaxAge is how long workers' completion records and step-pipeline
	// runs are kept after their last write, at most. A record is needed only
	// until its batch's progress moves past the function, so this bounds the
	// buckets' growth without bounding any batch; a completion record
	// expires sooner, RecordTTL after it was written. Default 7 days.
	ResultsMaxAge time.Duration
	// FinishedMaxAge is how long a finished batch's records (its batch
	// record, progress, submitter index and idempotency keys) are kept
	// after it finished: the server removes each on its own (a per-message
	// TTL on the record's last write). A batch with a dead letter keeps
	// its record as long as the dead letter (DLQMaxAge) if that is longer.
	// At least 1s. Default 7 days.
	FinishedMaxAge time.Duration
	// AckWait is how long a processor may hold a token before it is
	// redelivered to another replica. Default 30s.
	AckWait time.Duration
	// MaxAckPending bounds the tokens a domain's processors hold at once,
	// including those waiting on a retry delay or a confirmation. Default 10000.
	MaxAckPending int
}

// DefaultSettings are the settings of a single machine.
func DefaultSettings() Settings {
	return Settings{
		Replicas:        1,
		DuplicateWindow: 2 * time.Minute,
		CallbackMaxAge:  7 * 24 * time.Hour,
		DLQMaxAge:       30 * 24 * time.Hour,
		ResultsMaxAge:   7 * 24 * time.Hour,
		FinishedMaxAge:  7 * 24 * time.Hour,
		AckWait:         30 * time.Second,
		MaxAckPending:   10000,
	}
}

// Validate reports the first setting out of range.
func (s Settings) Validate() error {
	switch {
	case s.Replicas < 1 || s.Replicas > 5:
		return fmt.Errorf("%w: replicas must be 1 to 5 (got %d)", ErrSettings, s.Replicas)
	case s.DuplicateWindow <= 0:
		return fmt.Errorf("%w: duplicate window must be positive (got %s)", ErrSettings, s.DuplicateWindow)
	case s.CallbackMaxAge < s.DuplicateWindow:
		return fmt.Errorf("%w: callback max age must be ≥ the duplicate window %s (got %s)", ErrSettings, s.DuplicateWindow, s.CallbackMaxAge)
	case s.DLQMaxAge <= 0:
		return fmt.Errorf("%w: dlq max age must be positive (got %s)", ErrSettings, s.DLQMaxAge)
	case s.DLQMaxAge < s.DuplicateWindow:
		// The server refuses a stream whose duplicate window outlasts its
		// messages, with a message that names neither setting.
		return fmt.Errorf("%w: dlq max age must be ≥ the duplicate window %s (got %s)", ErrSettings, s.DuplicateWindow, s.DLQMaxAge)
	case s.ResultsMaxAge < time.Hour:
		return fmt.Errorf("%w: results max age must be at least 1h (got %s)", ErrSettings, s.ResultsMaxAge)
	case s.FinishedMaxAge < time.Second:
		return fmt.Errorf("%w: finished max age must be at least 1s (got %s)", ErrSettings, s.FinishedMaxAge)
	case s.AckWait < time.Second:
		return fmt.Errorf("%w: ack wait must be at least 1s (got %s)", ErrSettings, s.AckWait)
	case s.MaxAckPending < 1:
		return fmt.Errorf("%w: max ack pending must be ≥ 1 (got %d)", ErrSettings, s.MaxAckPending)
	}
	return nil
}

func (s Settings) storage() jetstream.StorageType {
	if s.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// QueueTokens counts the tokens in queue p's stream st, of every domain:
// the stream's authz keeper (KeeperSubject) is not one.
func QueueTokens(ctx context.Context, st jetstream.Stream, p pipeline.Priority) (uint64, error) {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(QueueTokensFilter(p)))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

// Streams declares every stream of the system.
func Streams(s Settings) []jetstream.StreamConfig {
	queue := func(name string, p pipeline.Priority) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: "tickflow " + string(p) + " priority queue tokens",
			Subjects:    []string{"batches." + string(p) + ".*", "requeue." + string(p) + ".*", KeeperSubject(p)},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     s.storage(),
			Replicas:    s.Replicas,
			Duplicates:  s.DuplicateWindow,
			Discard:     jetstream.DiscardOld,
			AllowDirect: true,
			// The keeper carries a time to live, so one whose authz died
			// before replacing it goes by itself.
			AllowMsgTTL: true,
		}
	}
	return []jetstream.StreamConfig{
		queue(StreamHigh, pipeline.High),
		queue(StreamMed, pipeline.Med),
		{
			// A callback is removed once every consumer acknowledged it:
			// authz's, once applied (or dead-lettered with its bytes).
			// MaxAge bounds only the ones never applied.
			Name:        StreamCallbacks,
			Description: "tickflow callbacks from processors to authz",
			Subjects:    []string{"callbacks.*"},
			Retention:   jetstream.InterestPolicy,
			Storage:     s.storage(),
			Replicas:    s.Replicas,
			Duplicates:  s.DuplicateWindow,
			MaxAge:      s.CallbackMaxAge,
		},
		{
			Name:        StreamConfirm,
			Description: "tickflow callback confirmations from outside",
			Subjects:    []string{"confirm.*.*.*"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     s.storage(),
			Replicas:    s.Replicas,
			Duplicates:  s.DuplicateWindow,
		},
		{
			Name:        StreamDLQ,
			Description: "tickflow dead letters, replayable",
			Subjects:    []string{DLQSubjects},
			Retention:   jetstream.LimitsPolicy,
			Storage:     s.storage(),
			Replicas:    s.Replicas,
			Duplicates:  s.DuplicateWindow,
			MaxAge:      s.DLQMaxAge,
		},
		{
			// The submitter index: read newest first, an entry at a time,
			// through the earlier entries' sequences each entry holds.
			Name:        StreamSubmitted,
			Description: "tickflow submitter index: each submitter's batches in the order accepted",
			Subjects:    []string{SubmittedSubjects},
			Retention:   jetstream.LimitsPolicy,
			Storage:     s.storage(),
			Replicas:    s.Replicas,
			Duplicates:  s.DuplicateWindow,
			AllowDirect: true,
			MaxAge:      s.SubmittedMaxAge(),
		},
		{
			// Schedules wait here, not in HIGH and MED: a stream that allows
			// schedules allows roll-ups and schedule-purge headers from
			// whoever may publish to it, and processors publish to the
			// queues (requeue.>). Only authz publishes here.
			Name:              StreamScheduled,
			Description:       "tickflow schedules of batches sent to run later, and their fired tokens",
			Subjects:          []string{ScheduleSubjects, DueSubject},
			Retention:         jetstream.WorkQueuePolicy,
			Storage:           s.storage(),
			Replicas:          s.Replicas,
			Duplicates:        s.DuplicateWindow,
			Discard:           jetstream.DiscardOld,
			AllowDirect:       true,
			AllowMsgSchedules: true,
			AllowRollup:       true,
		},
		{
			Name:        StreamIDs,
			Description: "tickflow global batch ids: each id is a sequence of this log",
			Subjects:    []string{IDsSubject},
			Retention:   jetstream.LimitsPolicy,
			Storage:     s.storage(),
			Replicas:    s.Replicas,
			Duplicates:  s.DuplicateWindow,
			MaxMsgs:     1,
		},
	}
}

// Buckets declares every KV bucket of the system.
func Buckets(s Settings) []jetstream.KeyValueConfig {
	kv := func(name, desc string, history uint8) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{
			Bucket:      name,
			Description: desc,
			History:     history,
			Storage:     s.storage(),
			Replicas:    s.Replicas,
		}
	}
	// Batch records, progress, pause state and locks live as long as they
	// are needed; completion records and runs expire.
	expiring := func(c jetstream.KeyValueConfig) jetstream.KeyValueConfig {
		c.TTL = s.resultsAge()
		return c
	}
	// Keys come and go with callers' choices: an emptied key's order is
	// purged with a marker that expires (keyorder.MarkerTTL), so the bucket
	// holds only keys with batches.
	markers := func(c jetstream.KeyValueConfig) jetstream.KeyValueConfig {
		c.LimitMarkerTTL = time.Minute
		return c
	}
	// Presence records are refreshed while their process runs, so one
	// left by a process that died drops out on its own.
	present := func(c jetstream.KeyValueConfig) jetstream.KeyValueConfig {
		c.TTL = PresenceTTL
		return c
	}
	return []jetstream.KeyValueConfig{
		s.retained(kv(BucketBatches, "tickflow batch records, authoritative for authz", 1)),
		s.retained(kv(BucketProgress, "tickflow execution progress, authoritative for processors", 1)),
		kv(BucketDomainStates, "tickflow processors paused or active, per domain", 5),
		kv(BucketLocks, "tickflow per-key and sender leases", 1),
		markers(kv(BucketKeys, "tickflow per-key order: the batches waiting per domain and key", 1)),
		kv(BucketSenders, "tickflow sender pools and their leases, per domain", 1),
		s.recordsExpire(expiring(kv(BucketResults, "tickflow completion records of workers, per function", 1))),
		expiring(kv(BucketRuns, "tickflow step-pipeline runs and step outputs", 1)),
		present(kv(BucketPresence, "tickflow running processors and workers, refreshed while they run", 1)),
		kv(BucketSchedules, "tickflow periodic schedules: the last period fired and the pause state, per schedule", 1),
	}
}

// ConsumerSpec is a consumer and the stream it reads.
type ConsumerSpec struct {
	Stream string
	Config jetstream.ConsumerConfig
}

// DomainConsumers declares the durable consumers domain's processors share.
func DomainConsumers(s Settings, domain string) []ConsumerSpec {
	queue := func(p pipeline.Priority) ConsumerSpec {
		return ConsumerSpec{Stream: QueueStream(p), Config: jetstream.ConsumerConfig{
			Durable:        ProcessorConsumer(domain),
			Description:    "tickflow processors of " + domain,
			FilterSubjects: []string{TokenSubject(p, domain), RequeueSubject(p, domain)},
			AckPolicy:      jetstream.AckExplicitPolicy,
			DeliverPolicy:  jetstream.DeliverAllPolicy,
			AckWait:        s.AckWait,
			// Attempts are counted exactly in the progress record, not by
			// redeliveries: a crashed processor's redelivery is not a failure.
			MaxDeliver:    -1,
			MaxAckPending: s.MaxAckPending,
			Replicas:      s.Replicas,
		}}
	}
	return []ConsumerSpec{
		queue(pipeline.High),
		queue(pipeline.Med),
		{Stream: StreamConfirm, Config: jetstream.ConsumerConfig{
			Durable:       ProcessorConsumer(domain),
			Description:   "tickflow confirmations for " + domain,
			FilterSubject: ConfirmFilter(domain),
			AckPolicy:     jetstream.AckExplicitPolicy,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckWait:       s.AckWait,
			MaxDeliver:    -1,
			MaxAckPending: s.MaxAckPending,
			Replicas:      s.Replicas,
		}},
	}
}

// SystemConsumers declares the consumers that are not per domain.
func SystemConsumers(s Settings) []ConsumerSpec {
	return []ConsumerSpec{{Stream: StreamCallbacks, Config: jetstream.ConsumerConfig{
		Durable:       CallbacksConsumer,
		Description:   "authz applies callbacks to batch records",
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       s.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: s.MaxAckPending,
		Replicas:      s.Replicas,
	}}, {Stream: StreamScheduled, Config: jetstream.ConsumerConfig{
		Durable:       ScheduledConsumer,
		Description:   "authz forwards fired schedules to their queues",
		FilterSubject: DueSubject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       s.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: s.MaxAckPending,
		Replicas:      s.Replicas,
	}}}
}

// KeepCallbacks adds the consumer CallbacksKeeper to CALLBACKS, so that
// applied callbacks stay in the stream, for a checker that reads them
// all; it needs the admin identity. Nothing in a deployment calls it:
// there, a callback is removed once authz applied it.
func KeepCallbacks(ctx context.Context, js jetstream.JetStream, s Settings) error {
	_, err := js.CreateOrUpdateConsumer(ctx, StreamCallbacks, jetstream.ConsumerConfig{
		Durable:       CallbacksKeeper,
		Description:   "keeps every callback for a checker; never acknowledges",
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Replicas:      s.Replicas,
	})
	if err != nil {
		return fmt.Errorf("streams: keep callbacks: %w", err)
	}
	return nil
}

// Provision creates or updates every stream, bucket and consumer, for the
// given domains. It is idempotent: running it again with the same settings
// changes nothing. It needs the admin identity.
func Provision(ctx context.Context, js jetstream.JetStream, s Settings, domains ...string) error {
	if err := s.Validate(); err != nil {
		return err
	}
	for _, d := range domains {
		if err := ValidateDomain(d); err != nil {
			return err
		}
	}
	for _, cfg := range Streams(s) {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("streams: provision stream %s: %w", cfg.Name, err)
		}
	}
	for _, cfg := range Buckets(s) {
		var err error
		if len(cfg.Metadata) > 0 {
			// A bucket whose records expire one by one: its stream allows
			// a per-message TTL, which the KV configuration cannot say
			// without also asking for a marker at every expiry.
			_, err = js.CreateOrUpdateStream(ctx, KVStreamConfig(cfg))
		} else {
			_, err = js.CreateOrUpdateKeyValue(ctx, cfg)
		}
		if err != nil {
			return fmt.Errorf("streams: provision bucket %s: %w", cfg.Bucket, err)
		}
	}
	specs := SystemConsumers(s)
	for _, d := range domains {
		specs = append(specs, DomainConsumers(s, d)...)
	}
	for _, c := range specs {
		if _, err := js.CreateOrUpdateConsumer(ctx, c.Stream, c.Config); err != nil {
			return fmt.Errorf("streams: provision consumer %s on %s: %w", c.Config.Durable, c.Stream, err)
		}
	}
	return nil
}
