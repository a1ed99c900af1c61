package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// TypeRecord is the function type the Recorder serves.
const TypeRecord = "chaos.record"

// Step is the payload of a chaos.record function: what the handler does.
type Step struct {
	// SleepMS is how long the handler works before its effect, honouring
	// its context: a call whose deadline passes first has no effect.
	SleepMS int `msgpack:"sleep_ms" json:"sleep_ms,omitempty"`
	// Fail makes every attempt fail permanently.
	Fail bool `msgpack:"fail" json:"fail,omitempty"`
	// FailAttempts makes the first attempts fail, retryably.
	FailAttempts int `msgpack:"fail_attempts" json:"fail_attempts,omitempty"`
}

// Recorder is the chaos.record handler. Its effect is one line appended to
// its execution log and synced to disk before the handler returns, so every
// execution that took effect is on disk even if the process is killed the
// next instant. Failed attempts are logged too, marked as failures. It is
// safe for concurrent use.
type Recorder struct {
	mu  sync.Mutex
	f   *os.File
	pid int
}

// OpenRecorder opens (creating) this process's execution log in dir, one
// file per process so concurrent workers never interleave a line.
func OpenRecorder(dir string) (*Recorder, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: execution log: %w", err)
	}
	pid := os.Getpid()
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(pid)+execLogExt), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chaos: execution log: %w", err)
	}
	return &Recorder{f: f, pid: pid}, nil
}

// Close closes the log.
func (r *Recorder) Close() error { return r.f.Close() }

// errInjected is the failure a Step asks for.
var errInjected = errors.New("chaos: injected failure")

// Handle runs one chaos.record call as its payload says.
func (r *Recorder) Handle(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
	var s Step
	if err := call.Payload.Decode(&s); err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	if s.SleepMS > 0 {
		t := time.NewTimer(time.Duration(s.SleepMS) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return pipeline.Result{}, ctx.Err()
		}
	}
	var fail error
	switch {
	case s.Fail:
		fail = pipeline.Permanent(errInjected)
	case call.Attempt <= s.FailAttempts:
		fail = fmt.Errorf("%w (attempt %d of %d failing)", errInjected, call.Attempt, s.FailAttempts)
	}
	e := Execution{At: time.Now(), BatchID: call.BatchID, Index: call.Index, Attempt: call.Attempt, PID: r.pid, OK: fail == nil}
	if err := r.append(e); err != nil {
		// Nothing took effect; the processor retries.
		return pipeline.Result{}, err
	}
	if fail != nil {
		return pipeline.Result{}, fail
	}
	return pipeline.Result{Data: pipeline.MustPayload(map[string]any{"pid": r.pid})}, nil
}

func (r *Recorder) append(e Execution) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.f.WriteString(e.line()); err != nil {
		return fmt.Errorf("chaos: execution log: %w", err)
	}
	if err := r.f.Sync(); err != nil {
		return fmt.Errorf("chaos: execution log: %w", err)
	}
	return nil
}
