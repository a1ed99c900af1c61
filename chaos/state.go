package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
)

// State is what a run left behind, read once everything has stopped moving.
type State struct {
	// Records are the batch records by id.
	Records map[uint64]records.BatchRecord
	// Callbacks are the callbacks in CALLBACKS, alone or members of a
	// group, by batch id.
	Callbacks map[uint64][]records.Callback
	// CallbackMessages counts the messages in CALLBACKS.
	CallbackMessages int
	// DeadLetters counts the DLQ entries by batch id (0: undecodable).
	DeadLetters map[uint64]int
	// Progress are the progress records by batch id.
	Progress map[uint64]records.Progress
	// Claims lists, by batch id, the keys of completion records that are
	// still claims: a worker started the call and never recorded its end.
	Claims map[uint64][]string
	// Slots names, by batch id, the labels whose concurrency slot the
	// batch still holds.
	Slots map[uint64][]string
	// Tokens counts the queue tokens left in HIGH and MED, by batch id.
	Tokens map[uint64]int
	// Executions are the workers' execution logs; Torn counts lines cut
	// short by a kill (no effect).
	Executions []Execution
	Torn       int
}

// readTimeout bounds each read of the final state.
const readTimeout = 10 * time.Second

// ReadState reads the final state through nc (as admin) and the execution
// logs in execDir.
func ReadState(ctx context.Context, nc *nats.Conn, execDir string) (*State, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st := &State{
		Records: map[uint64]records.BatchRecord{}, Callbacks: map[uint64][]records.Callback{},
		DeadLetters: map[uint64]int{}, Progress: map[uint64]records.Progress{},
		Claims: map[uint64][]string{}, Slots: map[uint64][]string{}, Tokens: map[uint64]int{},
	}
	steps := []func(context.Context, jetstream.JetStream, *State) error{
		readRecords, readProgress, readClaims, readSlots, readCallbacks, readDeadLetters, readTokens,
	}
	for _, f := range steps {
		if err := f(ctx, js, st); err != nil {
			return nil, err
		}
	}
	if st.Executions, st.Torn, err = ReadExecutions(execDir); err != nil {
		return nil, err
	}
	return st, nil
}

// eachEntry calls f with every live entry of bucket.
func eachEntry(ctx context.Context, js jetstream.JetStream, bucket string, f func(jetstream.KeyValueEntry) error) error {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	kv, err := js.KeyValue(rctx, bucket)
	if err != nil {
		return fmt.Errorf("chaos: bucket %s: %w", bucket, err)
	}
	keys, err := kv.ListKeys(rctx)
	if err != nil {
		return fmt.Errorf("chaos: keys of %s: %w", bucket, err)
	}
	names := map[string]bool{}
	for k := range keys.Keys() {
		names[k] = true
	}
	if err := rctx.Err(); err != nil {
		return fmt.Errorf("chaos: keys of %s: %w", bucket, err)
	}
	for k := range names {
		e, err := kv.Get(rctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("chaos: %s %s: %w", bucket, k, err)
		}
		if err := f(e); err != nil {
			return err
		}
	}
	return nil
}

// leadingID reads the batch id a key starts with ("17", "17.0.0", "chaos.17").
func leadingID(key string) (uint64, bool) {
	first, _, _ := strings.Cut(key, ".")
	id, err := strconv.ParseUint(first, 10, 64)
	return id, err == nil
}

func readRecords(ctx context.Context, js jetstream.JetStream, st *State) error {
	return eachEntry(ctx, js, streams.BucketBatches, func(e jetstream.KeyValueEntry) error {
		id, err := strconv.ParseUint(e.Key(), 10, 64)
		if err != nil {
			return nil // an idempotency key's entry
		}
		rec, err := records.Decode[records.BatchRecord](e.Value())
		if err != nil {
			return fmt.Errorf("chaos: record %d: %w", id, err)
		}
		st.Records[id] = rec
		return nil
	})
}

func readProgress(ctx context.Context, js jetstream.JetStream, st *State) error {
	return eachEntry(ctx, js, streams.BucketProgress, func(e jetstream.KeyValueEntry) error {
		p, err := records.Decode[records.Progress](e.Value())
		if err != nil {
			return fmt.Errorf("chaos: progress %s: %w", e.Key(), err)
		}
		st.Progress[p.BatchID] = p
		return nil
	})
}

// readClaims lists the claims left in the results bucket: a completion
// key that is still a claim, and a claim entry of a unit group (whose
// entries name their units' keys).
func readClaims(ctx context.Context, js jetstream.JetStream, st *State) error {
	return eachEntry(ctx, js, streams.BucketResults, func(e jetstream.KeyValueEntry) error {
		if strings.HasPrefix(e.Key(), streams.UnitGroupKeyPrefix) {
			g, err := records.Decode[records.UnitGroup](e.Value())
			if err != nil {
				return fmt.Errorf("chaos: unit group %s: %w", e.Key(), err)
			}
			for _, u := range g.Units {
				if id, ok := leadingID(u.Key); ok && u.Running {
					st.Claims[id] = append(st.Claims[id], u.Key)
				}
			}
			return nil
		}
		c, err := records.Decode[records.Completion](e.Value())
		if err != nil {
			return fmt.Errorf("chaos: completion record %s: %w", e.Key(), err)
		}
		if id, ok := leadingID(e.Key()); ok && c.Running {
			st.Claims[id] = append(st.Claims[id], e.Key())
		}
		return nil
	})
}

// labelSlots is the locks bucket's record of a label's batches in process,
// as authz keeps it under "label.<label>".
type labelSlots struct {
	IDs map[string]time.Time `json:"ids"`
}

func readSlots(ctx context.Context, js jetstream.JetStream, st *State) error {
	return eachEntry(ctx, js, streams.BucketLocks, func(e jetstream.KeyValueEntry) error {
		label, ok := strings.CutPrefix(e.Key(), "label.")
		if !ok {
			return nil
		}
		var sl labelSlots
		if err := json.Unmarshal(e.Value(), &sl); err != nil {
			return fmt.Errorf("chaos: slots of %s: %w", label, err)
		}
		for k := range sl.IDs {
			if id, err := strconv.ParseUint(k, 10, 64); err == nil {
				st.Slots[id] = append(st.Slots[id], label)
			}
		}
		return nil
	})
}

// eachMsg calls f with every message of stream, in order.
func eachMsg(ctx context.Context, js jetstream.JetStream, stream string, f func(*jetstream.RawStreamMsg) error) error {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	s, err := js.Stream(rctx, stream)
	if err != nil {
		return fmt.Errorf("chaos: stream %s: %w", stream, err)
	}
	for seq := uint64(1); ; {
		m, err := s.GetMsg(rctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("chaos: %s message %d: %w", stream, seq, err)
		}
		if err := f(m); err != nil {
			return err
		}
		seq = m.Sequence + 1
	}
}

func readCallbacks(ctx context.Context, js jetstream.JetStream, st *State) error {
	return eachMsg(ctx, js, streams.StreamCallbacks, func(m *jetstream.RawStreamMsg) error {
		cbs, _, err := records.DecodeCallbacks(m.Data)
		if err != nil {
			return fmt.Errorf("chaos: callback %d: %w", m.Sequence, err)
		}
		st.CallbackMessages++
		for _, cb := range cbs {
			st.Callbacks[cb.BatchID] = append(st.Callbacks[cb.BatchID], cb)
		}
		return nil
	})
}

func readDeadLetters(ctx context.Context, js jetstream.JetStream, st *State) error {
	return eachMsg(ctx, js, streams.StreamDLQ, func(m *jetstream.RawStreamMsg) error {
		dl, err := records.Decode[records.DeadLetter](m.Data)
		if err != nil {
			st.DeadLetters[0]++ // a raw token: counted against no batch
			return nil
		}
		st.DeadLetters[dl.Batch.ID]++
		return nil
	})
}

func readTokens(ctx context.Context, js jetstream.JetStream, st *State) error {
	for _, stream := range []string{streams.StreamHigh, streams.StreamMed} {
		err := eachMsg(ctx, js, stream, func(m *jetstream.RawStreamMsg) error {
			if streams.IsKeeper(m.Subject) {
				return nil // the queue's keeper, not a token
			}
			tok, err := records.Decode[records.Token](m.Data)
			if err != nil {
				st.Tokens[0]++
				return nil
			}
			st.Tokens[tok.BatchID]++
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
