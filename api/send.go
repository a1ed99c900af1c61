package api

import (
	"time"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tickflow/tickflow/pipeline"
)

// SendRequest submits a batch.
type SendRequest struct {
	Label     string `json:"label"`
	Functions Calls  `json:"functions"`
	// Key, when set, serialises batches with the same key.
	Key string `json:"key,omitempty"`
	// IdempotencyKey makes a repeated submission return the same batch.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// RunAt schedules the batch: an RFC 3339 time before which it does not
	// run. A time not in the future runs it at once.
	RunAt string `json:"run_at,omitempty"`
	// Delay schedules the batch that long after the send: a Go duration
	// such as "90s" or "2h". At most one of RunAt and Delay; both are
	// bounded by the label's max_delay.
	Delay string `json:"delay,omitempty"`
}

// SendReply says which batch was queued.
type SendReply struct {
	ID        uint64            `json:"id"`
	Domain    string            `json:"domain"`
	Priority  pipeline.Priority `json:"priority"`
	Duplicate bool              `json:"duplicate,omitempty"`
	// RunAt is when a scheduled batch runs (its first step, no earlier);
	// absent for a batch that runs at once.
	RunAt time.Time `json:"run_at,omitzero"`
}

// CallSpec is one function of a submission, as the caller writes it.
type CallSpec struct {
	Type string `json:"type"`
	// Payload is any JSON value that comes back unchanged (see
	// pipeline.Payload.UnmarshalJSON): a number that would not, such as
	// 1e999, is refused.
	Payload pipeline.Payload `json:"payload,omitempty"`
	// Expect is the confirmation content to wait for, for function types
	// whose rule requires a confirmation.
	Expect string `json:"expect,omitempty"`
}

// Calls are the functions of a submission, in order. Read from JSON, each
// is read strictly (no unknown fields), and an error names the function
// it is about, as in "functions[2].payload.amount".
type Calls []CallSpec

// UnmarshalJSON reads a JSON array of functions; null reads as none.
func (c *Calls) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		*c = nil
		return nil
	}
	out := make(Calls, 0, len(raw))
	for i, r := range raw {
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		var cs CallSpec
		if err := dec.Decode(&cs); err != nil {
			field := fmt.Sprintf("functions[%d]", i)
			var ve *pipeline.ValidationError
			if errors.As(err, &ve) {
				return &pipeline.ValidationError{Field: field + "." + ve.Field, Rule: ve.Rule}
			}
			return &pipeline.ValidationError{Field: field, Rule: JSONProblem(err)}
		}
		out = append(out, cs)
	}
	*c = out
	return nil
}
