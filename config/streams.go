package config

import (
	"errors"
	"time"

	"github.com/tickflow/tickflow/internal/streams"
)

// Storage kinds of Streams.Storage.
const (
	// StorageFile keeps streams and buckets on disk.
	StorageFile = "file"
	// StorageMemory keeps them in memory: fast, lost on restart.
	StorageMemory = "memory"
)

// Streams sizes the JetStream streams and buckets a command provisions. It
// is the file form of streams.Settings; see Settings.
type Streams struct {
	// Replicas per stream and bucket: 1 on one machine, 3 on a cluster;
	// 1 to 5. Default 1.
	Replicas int `yaml:"replicas"`
	// Storage is "file" or "memory". Default "file".
	Storage string `yaml:"storage"`
	// DuplicateWindow is how long the queue and callback streams remember
	// Nats-Msg-Id values. Default 2m.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	// CallbackMaxAge is how long a callback authz has not applied is kept
	// (one it applied leaves the stream at once); at least
	// DuplicateWindow. Default 168h (7 days).
	CallbackMaxAge time.Duration `yaml:"callback_max_age"`
	// DLQMaxAge is how long dead letters are kept. Default 720h (30 days).
	DLQMaxAge time.Duration `yaml:"dlq_max_age"`
	// ResultsMaxAge is how long completion records and step-pipeline runs
	// are kept after their last write, at most: a completion record
	// expires FinishedMaxAge after it was written, but never under
	// AckWait + DuplicateWindow (streams.Settings.RecordTTL). Default 168h
	// (7 days).
	ResultsMaxAge time.Duration `yaml:"results_max_age"`
	// FinishedMaxAge is how long every record of a finished batch (its
	// batch record, progress, submitter index and idempotency key) is kept
	// after it finished; the server removes each when it is due. A batch
	// with a dead letter keeps its record as long as the dead letter if
	// that is longer. At least 1s. Default 168h (7 days). It is
	// provisioned with the buckets, and read by authz and the processors
	// at their start.
	FinishedMaxAge time.Duration `yaml:"finished_max_age"`
	// AckWait is how long a processor may hold a token before it is
	// redelivered to another replica; at least 1s. Default 30s.
	AckWait time.Duration `yaml:"ack_wait"`
	// MaxAckPending bounds the tokens a domain's processors hold at once.
	// Default 10000.
	MaxAckPending int `yaml:"max_ack_pending"`
}

// DefaultStreams returns the defaults of one machine, those of
// streams.DefaultSettings.
func DefaultStreams() Streams {
	d := streams.DefaultSettings()
	storage := StorageFile
	if d.Memory {
		storage = StorageMemory
	}
	return Streams{
		Replicas:        d.Replicas,
		Storage:         storage,
		DuplicateWindow: d.DuplicateWindow,
		CallbackMaxAge:  d.CallbackMaxAge,
		DLQMaxAge:       d.DLQMaxAge,
		ResultsMaxAge:   d.ResultsMaxAge,
		FinishedMaxAge:  d.FinishedMaxAge,
		AckWait:         d.AckWait,
		MaxAckPending:   d.MaxAckPending,
	}
}

// Settings returns s as the streams package takes it.
func (s Streams) Settings() streams.Settings {
	return streams.Settings{
		Replicas:        s.Replicas,
		Memory:          s.Storage == StorageMemory,
		DuplicateWindow: s.DuplicateWindow,
		CallbackMaxAge:  s.CallbackMaxAge,
		DLQMaxAge:       s.DLQMaxAge,
		ResultsMaxAge:   s.ResultsMaxAge,
		FinishedMaxAge:  s.FinishedMaxAge,
		AckWait:         s.AckWait,
		MaxAckPending:   s.MaxAckPending,
	}
}

// Validate reports the storage kind and the first setting
// streams.Settings.Validate rejects, as FieldErrors matching ErrInvalid; the
// latter also match streams.ErrSettings.
func (s Streams) Validate() error {
	var errs []error
	if s.Storage != StorageFile && s.Storage != StorageMemory {
		errs = append(errs, invalid("storage", "%q must be %q or %q", s.Storage, StorageFile, StorageMemory))
	}
	if err := s.Settings().Validate(); err != nil {
		rule := err.Error()
		if p := streams.ErrSettings.Error() + ": "; len(rule) > len(p) && rule[:len(p)] == p {
			rule = rule[len(p):]
		}
		errs = append(errs, &FieldError{Field: "", Rule: rule, Err: err})
	}
	return errors.Join(errs...)
}
