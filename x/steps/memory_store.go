package steps

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// MemoryStore is a RunStore in memory, for tests and single-process use. Its
// zero value is ready to use; it is safe for concurrent use.
//
// Records are kept JSON-encoded, as a persistent store keeps them, so a
// record comes back exactly as it would from one (Metadata numbers as
// float64, times without monotonic readings).
type MemoryStore struct {
	mu      sync.RWMutex
	runs    map[runKey][]byte
	outputs map[outputKey][]byte
}

type runKey struct{ processor, subject string }

type outputKey struct {
	runID string
	step  Step
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{} }

// LatestRun implements RunStore. It returns ErrNotFound if no run of
// processor was saved for subjectID.
func (s *MemoryStore) LatestRun(_ context.Context, processor, subjectID string) (*RunRecord, error) {
	s.mu.RLock()
	raw, ok := s.runs[runKey{processor, subjectID}]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: run of %s for subject %q", ErrNotFound, processor, subjectID)
	}
	rec := new(RunRecord)
	if err := json.Unmarshal(raw, rec); err != nil {
		return nil, fmt.Errorf("steps: memory store: decode run: %w", err)
	}
	return rec, nil
}

// SaveRun implements RunStore.
func (s *MemoryStore) SaveRun(_ context.Context, rec *RunRecord) error {
	if rec == nil {
		return fmt.Errorf("steps: memory store: save run: record is nil")
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("steps: memory store: encode run: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs = map[runKey][]byte{}
	}
	s.runs[runKey{rec.Processor, rec.SubjectID}] = raw
	return nil
}

// SaveStepOutput implements RunStore.
func (s *MemoryStore) SaveStepOutput(_ context.Context, runID string, step Step, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outputs == nil {
		s.outputs = map[outputKey][]byte{}
	}
	s.outputs[outputKey{runID, step}] = bytes.Clone(data)
	return nil
}

// StepOutput implements RunStore. It returns ErrNotFound if no output of
// step was saved for runID.
func (s *MemoryStore) StepOutput(_ context.Context, runID string, step Step) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	data, ok := s.outputs[outputKey{runID, step}]
	if !ok {
		return nil, fmt.Errorf("%w: %s output of run %s", ErrNotFound, step, runID)
	}
	return bytes.Clone(data), nil
}
