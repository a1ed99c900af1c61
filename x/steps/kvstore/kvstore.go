// Package kvstore keeps a step pipeline's runs and step outputs in the
// JetStream KV bucket streams.BucketRuns, so that lineage and resume survive
// a worker restart and work across replicas.
package kvstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/x/steps"
)

// Store is a steps.RunStore over the KV bucket streams.BucketRuns, so that a
// step pipeline's lineage and resume survive a worker restart and work
// across replicas. It is safe for concurrent use.
//
// Keys:
//
//	latest.<processor>.<subject>  the latest RunRecord, JSON
//	out.<run id>.<step>           a step's output, the JSON bytes as given
//
// Each id is encoded as one key token, so that any string (dots, '*', '>',
// spaces, non-ASCII) is data and never key syntax: "b" + the id in unpadded
// base64url, or, for an id over 96 bytes, "h" + its hex SHA-256.
//
// The bucket keeps one revision per key, so saving replaces. Nothing is
// deleted: step outputs accumulate until the bucket's limits (if any) or an
// operator remove them, which only turns a later resume into a full rerun.
type Store struct {
	kv jetstream.KeyValue
}

// New binds a Store to the runs bucket, which must have been
// provisioned (streams.Provision). The identity needs STREAM.INFO and DIRECT.GET on
// KV_runs and publish on $KV.runs.> (the worker user of nats.conf has them).
// It returns an error wrapping jetstream.ErrBucketNotFound if the bucket is
// missing.
func New(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv, err := js.KeyValue(ctx, streams.BucketRuns)
	if err != nil {
		return nil, fmt.Errorf("kvstore: bucket %s (provision it first): %w", streams.BucketRuns, err)
	}
	return &Store{kv: kv}, nil
}

var _ steps.RunStore = (*Store)(nil)

// LatestRun implements steps.RunStore. It returns an error wrapping
// steps.ErrNotFound if no run of processor was saved for subjectID, and one
// wrapping jetstream.ErrInvalidKey if either is empty.
func (s *Store) LatestRun(ctx context.Context, processor, subjectID string) (*steps.RunRecord, error) {
	key, err := latestKey(processor, subjectID)
	if err != nil {
		return nil, err
	}
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: run of %s for subject %q", steps.ErrNotFound, processor, subjectID)
	}
	if err != nil {
		return nil, fmt.Errorf("kvstore: latest run of %s for subject %q: %w", processor, subjectID, err)
	}
	rec := new(steps.RunRecord)
	if err := json.Unmarshal(e.Value(), rec); err != nil {
		return nil, fmt.Errorf("%w: run store: run of %s for subject %q: %w", records.ErrDecode, processor, subjectID, err)
	}
	// A hashed key token could, in theory, be shared by two ids: the record
	// names its own, so a collision reads as no record rather than another's.
	if rec.Processor != processor || rec.SubjectID != subjectID {
		return nil, fmt.Errorf("%w: run of %s for subject %q (key %s holds %s for %q)",
			steps.ErrNotFound, processor, subjectID, key, rec.Processor, rec.SubjectID)
	}
	return rec, nil
}

// SaveRun implements steps.RunStore. It returns an error wrapping
// jetstream.ErrInvalidKey if rec's Processor or SubjectID is empty.
func (s *Store) SaveRun(ctx context.Context, rec *steps.RunRecord) error {
	if rec == nil {
		return errors.New("kvstore: save run: record is nil")
	}
	key, err := latestKey(rec.Processor, rec.SubjectID)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("kvstore: encode run %s: %w", rec.RunID, err)
	}
	if _, err := s.kv.Put(ctx, key, raw); err != nil {
		return fmt.Errorf("kvstore: save run %s of %s for subject %q: %w", rec.RunID, rec.Processor, rec.SubjectID, err)
	}
	return nil
}

// SaveStepOutput implements steps.RunStore. data must fit the server's
// max_payload (1 MiB by default) with the key. It returns an error wrapping
// jetstream.ErrInvalidKey if runID or step is empty.
func (s *Store) SaveStepOutput(ctx context.Context, runID string, step steps.Step, data []byte) error {
	key, err := outputKey(runID, step)
	if err != nil {
		return err
	}
	// Put sends data before returning and keeps no reference to it.
	if _, err := s.kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("kvstore: save %s output of run %s: %w", step, runID, err)
	}
	return nil
}

// StepOutput implements steps.RunStore. It returns an error wrapping
// steps.ErrNotFound if no output of step was saved for runID, and one
// wrapping jetstream.ErrInvalidKey if either is empty.
func (s *Store) StepOutput(ctx context.Context, runID string, step steps.Step) ([]byte, error) {
	key, err := outputKey(runID, step)
	if err != nil {
		return nil, err
	}
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s output of run %s", steps.ErrNotFound, step, runID)
	}
	if err != nil {
		return nil, fmt.Errorf("kvstore: %s output of run %s: %w", step, runID, err)
	}
	return bytes.Clone(e.Value()), nil
}

// latestKey is the key of the latest run of processor for subjectID.
func latestKey(processor, subjectID string) (string, error) {
	if processor == "" || subjectID == "" {
		return "", fmt.Errorf("kvstore: processor %q and subject %q must both be non-empty: %w",
			processor, subjectID, jetstream.ErrInvalidKey)
	}
	return "latest." + runKeyToken(processor) + "." + runKeyToken(subjectID), nil
}

// outputKey is the key of the output of step in run runID.
func outputKey(runID string, step steps.Step) (string, error) {
	if runID == "" || step == "" {
		return "", fmt.Errorf("kvstore: run id %q and step %q must both be non-empty: %w",
			runID, step, jetstream.ErrInvalidKey)
	}
	return "out." + runKeyToken(runID) + "." + runKeyToken(string(step)), nil
}

// maxPlainToken is the longest id (in bytes) runKeyToken keeps reversible;
// longer ones are hashed so that a key stays well inside a NATS subject's
// practical limits (the server closes a connection whose control line
// exceeds max_control_line, 4 KiB by default).
const maxPlainToken = 96

// runKeyToken turns an arbitrary id into one KV key token, which may only
// hold [-_=a-zA-Z0-9] here (no dots, which separate tokens): "b" + the id in
// unpadded base64url when it is at most maxPlainToken bytes, else "h" + the
// hex SHA-256 of the id. The prefix keeps the two forms apart.
func runKeyToken(id string) string {
	if len(id) <= maxPlainToken {
		return "b" + base64.RawURLEncoding.EncodeToString([]byte(id))
	}
	sum := sha256.Sum256([]byte(id))
	return "h" + hex.EncodeToString(sum[:])
}
