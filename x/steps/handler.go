package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tickflow/tickflow/pipeline"
	"github.com/vmihailenco/msgpack/v5"
)

// Request is the payload (msgpack) of a function served by Handler: the
// subject to run for and the documents to run on. As JSON, e.g. for
// `nats req`:
//
//	{"subject_id": "UW-123",
//	 "stipulations": [{"name": "s_application_form", "content": "{\"business_name\": \"ACME Corp\", ...}"}]}
//
// The results of the batch's earlier functions are not in the payload: the
// handler takes them from Call.Inputs.
type Request struct {
	// SubjectID is what the run is about (an underwriting id, in the underwriting pipeline); required.
	SubjectID string `msgpack:"subject_id" json:"subject_id"`
	// Stipulations are documents supplied with the call, in order.
	Stipulations []Document `msgpack:"stipulations,omitempty" json:"stipulations,omitempty"`
}

// Document is a stipulation carried in a Request.
type Document struct {
	// Name is the dependency name, e.g. "s_bank_statement"; required.
	Name string `msgpack:"name" json:"name"`
	// SubjectID is the subject the document belongs to; empty means the
	// request's.
	SubjectID string `msgpack:"subject_id,omitempty" json:"subject_id,omitempty"`
	// Content is the document, a msgpack binary or string.
	Content []byte `msgpack:"content" json:"content"`
}

// StepCode is the error code (pipeline.WithCode) Handler attaches to a
// failure at step: "steps." + step, e.g. "steps.extraction". A batch can
// list it in a retry logic's NonRetryable or RetryOn.
func StepCode(step Step) string { return "steps." + string(step) }

// Handler serves r as a pipeline function, so that the functions of a batch
// form a dependency-checked pipeline: each one's Result is an output the
// later functions receive in Call.Inputs.
//
// The call's payload is a Request. The inputs of the run are the request's
// stipulations followed by the earlier outputs that decode with
// DecodeOutput (outputs of other handlers are skipped). The handler runs
// r.Execute once per call; the RunStore gives a retry of the call its
// lineage and its resume point, even on another worker.
//
// On success the output is the Result encoded with EncodeOutput. On failure
// the error (which names the failed step, and carries StepCode of it) is
// permanent for a failure at dependency or validation and retryable for
// processing and extraction; a bad payload is permanent. Handler panics if r
// is nil.
func Handler(r *Runner) pipeline.Handler {
	if r == nil {
		panic("steps: Handler of a nil Runner")
	}
	return &handler{r: r}
}

type handler struct{ r *Runner }

// Handle implements pipeline.Handler.
func (h *handler) Handle(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
	var req Request
	if err := call.Payload.Decode(&req); err != nil {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf(
			"steps: %s: payload of function %d: %w (want a map with subject_id and stipulations)", h.r.Name(), call.Index, err))
	}
	if req.SubjectID == "" {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf(
			"%w: %s: payload of function %d has no subject_id", ErrEmptySubject, h.r.Name(), call.Index))
	}
	inputs := make([]Input, 0, len(req.Stipulations)+len(call.Inputs))
	for i, d := range req.Stipulations {
		if d.Name == "" {
			return pipeline.Result{}, pipeline.Permanent(fmt.Errorf(
				"steps: %s: payload of function %d: stipulations[%d].name is empty; want e.g. \"s_bank_statement\"", h.r.Name(), call.Index, i))
		}
		subject := d.SubjectID
		if subject == "" {
			subject = req.SubjectID
		}
		inputs = append(inputs, Stipulation{Name: d.Name, SubjectID: subject, Content: d.Content})
	}
	for _, out := range call.Inputs {
		in, err := DecodeOutput(out.Data)
		switch {
		case errors.Is(err, ErrUnknownInput):
			continue // another kind of handler's output: not for the pipeline
		case err != nil:
			return pipeline.Result{}, pipeline.Permanent(fmt.Errorf(
				"steps: %s: output of function %d (%s): %w", h.r.Name(), out.Index, out.Type, err))
		}
		inputs = append(inputs, in)
	}

	res := h.r.Execute(ctx, req.SubjectID, inputs, nil)
	if err := res.Err(); err != nil {
		return pipeline.Result{}, failure(res.Error.Step, err)
	}
	data, err := EncodeOutput(res)
	if err != nil {
		// The run succeeded and was recorded, so a retry would run in full
		// and fail here again.
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("steps: %s: %w", h.r.Name(), err))
	}
	return pipeline.Result{Data: data}, nil
}

// failure is the handler's error for a run that failed at step with err.
//
// Dependency and validation failures are permanent: both steps are pure
// functions of the inputs, and a retry of the function gets the same inputs
// (its payload is fixed when the batch is accepted, the earlier outputs when
// they are recorded), so it would fail the same way and only use up the
// retries before the fallback or the dead letter. Processing and extraction
// may fail for reasons outside the inputs (a record source, a bug fixed by a
// redeploy) and resume where they failed, so they are retried. A step
// stopped by the context (the call's deadline, a shutdown) is retried
// whatever the step: the inputs were not at fault.
func failure(step Step, err error) error {
	err = pipeline.WithCode(StepCode(step), err)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if step == StepDependency || step == StepValidation {
		return pipeline.Permanent(err)
	}
	return err
}

// EncodeOutput encodes in, a Result or a Stipulation (value or pointer), as
// a function's output that DecodeOutput reads back: its JSON encoding (with
// "kind", see Result.MarshalJSON) as one msgpack binary. The JSON is wrapped
// rather than converted because a Result's payloads are arbitrary JSON
// values that must come back exactly as a JSON round trip leaves them.
// Anything else is an error wrapping ErrUnknownInput.
func EncodeOutput(in Input) (pipeline.Payload, error) {
	switch v := in.(type) {
	case Result, Stipulation:
	case *Result:
		if v == nil {
			return nil, fmt.Errorf("%w: nil *Result", ErrUnknownInput)
		}
	case *Stipulation:
		if v == nil {
			return nil, fmt.Errorf("%w: nil *Stipulation", ErrUnknownInput)
		}
	default:
		return nil, fmt.Errorf("%w: cannot encode %T as an output (want a Result or a Stipulation)", ErrUnknownInput, in)
	}
	raw, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("steps: encode output: %w", err)
	}
	return pipeline.EncodePayload(raw)
}

// DecodeOutput decodes a function's output written by EncodeOutput: a
// msgpack binary (or string) holding a JSON-encoded Result (returned as
// *Result) or Stipulation (returned as Stipulation), see DecodeInput. Data
// that is not such an output (empty, another msgpack value, not a JSON
// object, no known "kind") is an error wrapping ErrUnknownInput; an output
// of a known kind that does not decode is another error.
func DecodeOutput(data pipeline.Payload) (Input, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty output", ErrUnknownInput)
	}
	var raw []byte
	if err := msgpack.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: output is not a msgpack binary or string: %v", ErrUnknownInput, err)
	}
	var probe struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("%w: output is not a JSON object: %v", ErrUnknownInput, err)
	}
	return DecodeInput(raw)
}
