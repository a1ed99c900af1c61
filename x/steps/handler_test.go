package steps_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/x/steps"
	"github.com/vmihailenco/msgpack/v5"
)

// upstream requires s_doc; report requires s_doc and upstream's result.
func upstream() *countingProcessor {
	return &countingProcessor{name: "upstream", required: []string{"s_doc"}}
}

func report() *countingProcessor {
	return &countingProcessor{name: "report", required: []string{"s_doc", "p_upstream"}}
}

// request is a handler payload for subject with one s_doc.
func request(subj, content string) steps.Request {
	return steps.Request{SubjectID: subj, Stipulations: []steps.Document{{Name: "s_doc", Content: []byte(content)}}}
}

func handlerCall(index int, payload any, inputs ...pipeline.Output) *pipeline.Call {
	return &pipeline.Call{BatchID: 7, Index: index, Type: "test.fn", Payload: pipeline.MustPayload(payload), Attempt: 1, Inputs: inputs}
}

// decodeResult decodes a handler's output into the Result it carries.
func decodeResult(t *testing.T, data pipeline.Payload) *steps.Result {
	t.Helper()
	in, err := steps.DecodeOutput(data)
	if err != nil {
		t.Fatalf("DecodeOutput: %v", err)
	}
	r, ok := in.(*steps.Result)
	if !ok {
		t.Fatalf("DecodeOutput = %T, want *steps.Result", in)
	}
	return r
}

// TestHandlerChain runs two functions of a batch: the second receives the
// first's output among its inputs and passes its dependency check; outputs
// of other handlers are skipped.
func TestHandlerChain(t *testing.T) {
	ctx := t.Context()
	store := steps.NewMemoryStore()
	up := steps.Handler(newRunner(t, upstream(), store))
	down := report()
	h := steps.Handler(newRunner(t, down, store))

	first, err := up.Handle(ctx, handlerCall(0, request(subject, "hello")))
	if err != nil {
		t.Fatalf("upstream: %v", err)
	}
	if got := decodeResult(t, first.Data); !got.Success || got.ProcessorName != "p_upstream" || got.SubjectID != subject {
		t.Fatalf("upstream output = %+v", got)
	}

	res, err := h.Handle(ctx, handlerCall(3, request(subject, "hello world"),
		pipeline.Output{Index: 0, Type: "test.upstream", Data: first.Data},
		pipeline.Output{Index: 1, Type: "noop"},
		pipeline.Output{Index: 2, Type: "ledger.transfer", Data: pipeline.MustPayload(map[string]any{"kind": "result"})},
	))
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	got := decodeResult(t, res.Data)
	if !got.Success || got.ProcessorName != "p_report" {
		t.Fatalf("report output = %+v", got)
	}
	// The run saw s_doc and p_upstream, nothing else.
	if label := got.ExtractionOutput["payload"].(map[string]any)["label"]; label != "2 items" {
		t.Fatalf("report ran on %v, want 2 items", label)
	}
	if c := down.counts(); c != [3]int64{1, 1, 1} {
		t.Fatalf("report counts = %v, want one run of each step", c)
	}
}

// TestHandlerFailures checks which failures are retried: dependency and
// validation failures are permanent, processing and extraction failures
// are not, and a context that ends is never the inputs' fault.
func TestHandlerFailures(t *testing.T) {
	upOut := func(t *testing.T, subj string) pipeline.Output {
		res, err := steps.Handler(newRunner(t, upstream(), steps.NewMemoryStore())).
			Handle(t.Context(), handlerCall(0, request(subj, "hello")))
		if err != nil {
			t.Fatal(err)
		}
		return pipeline.Output{Index: 0, Type: "test.upstream", Data: res.Data}
	}
	tests := []struct {
		name      string
		failAt    steps.Step // injected into the report processor; "" for none
		inputs    func(t *testing.T) []pipeline.Output
		cancel    bool
		step      steps.Step
		permanent bool
		is        error
	}{
		{name: "missing dependency", step: steps.StepDependency, permanent: true, is: steps.ErrDependencyNotFound,
			inputs: func(*testing.T) []pipeline.Output { return nil }},
		{name: "dependency of another subject", step: steps.StepDependency, permanent: true, is: steps.ErrDependencyMismatch,
			inputs: func(t *testing.T) []pipeline.Output { return []pipeline.Output{upOut(t, "UW-other")} }},
		{name: "validation", failAt: steps.StepValidation, step: steps.StepValidation, permanent: true, is: errInjected},
		{name: "processing", failAt: steps.StepProcessing, step: steps.StepProcessing, permanent: false, is: errInjected},
		{name: "extraction", failAt: steps.StepExtraction, step: steps.StepExtraction, permanent: false, is: errInjected},
		{name: "context ended", cancel: true, step: steps.StepDependency, permanent: false, is: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := report()
			if tt.failAt != "" {
				p.failAt(tt.failAt, 1)
			}
			inputs := []pipeline.Output{upOut(t, subject)}
			if tt.inputs != nil {
				inputs = tt.inputs(t)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tt.cancel {
				cancel()
			}
			res, err := steps.Handler(newRunner(t, p, steps.NewMemoryStore())).
				Handle(ctx, handlerCall(1, request(subject, "hello"), inputs...))
			if err == nil {
				t.Fatalf("Handle succeeded with %v", res)
			}
			if got := pipeline.IsPermanent(err); got != tt.permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, got, tt.permanent)
			}
			if !errors.Is(err, steps.ErrStepFailed) || !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want ErrStepFailed and %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), "p_report "+string(tt.step)) {
				t.Errorf("err = %q, want it to name the step %s", err, tt.step)
			}
			if codes := pipeline.Codes(err); !slices.Contains(codes, steps.StepCode(tt.step)) {
				t.Errorf("codes = %q, want %q", codes, steps.StepCode(tt.step))
			}
			retry := &pipeline.RetryLogic{Times: 3, Backoff: pipeline.Backoff{Kind: pipeline.Fixed, Initial: pipeline.Duration(time.Millisecond)}}
			if got := retry.Retryable(err); got != !tt.permanent {
				t.Errorf("Retryable = %v, want %v", got, !tt.permanent)
			}
		})
	}
}

// TestHandlerResumesOnAnotherRunner retries a call that failed at
// extraction with a new Runner over the same store, as a restarted worker
// does: only extraction runs again.
func TestHandlerResumesOnAnotherRunner(t *testing.T) {
	ctx := t.Context()
	store := steps.NewMemoryStore()
	up, err := steps.Handler(newRunner(t, upstream(), store)).Handle(ctx, handlerCall(0, request(subject, "hello")))
	if err != nil {
		t.Fatal(err)
	}
	call := handlerCall(1, request(subject, "hello"), pipeline.Output{Index: 0, Type: "test.upstream", Data: up.Data})

	before := report()
	before.failAt(steps.StepExtraction, 1)
	if _, err := steps.Handler(newRunner(t, before, store)).Handle(ctx, call); err == nil || pipeline.IsPermanent(err) {
		t.Fatalf("first attempt: err = %v, want a retryable failure", err)
	}
	after := report()
	call.Attempt = 2
	res, err := steps.Handler(newRunner(t, after, store)).Handle(ctx, call)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if c := after.counts(); c != [3]int64{0, 0, 1} {
		t.Fatalf("retry ran validation, processing, extraction %v times, want only extraction", c)
	}
	got := decodeResult(t, res.Data)
	if got.Context.RetryCount != 1 || got.Context.LastErrorStep != steps.StepExtraction ||
		got.Context.Metadata[steps.MetaResumeStep] != string(steps.StepExtraction) {
		t.Fatalf("retry context = %+v, want retry 1 resumed at extraction", got.Context)
	}
}

func TestHandlerRejectsBadPayloads(t *testing.T) {
	corrupt, err := msgpack.Marshal([]byte(`{"kind":"result","success":"yes"}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		payload any
		inputs  []pipeline.Output
		want    string
	}{
		{name: "not a map", payload: "UW-123", want: "payload of function 1"},
		{name: "no subject", payload: map[string]any{"stipulations": []any{}}, want: "no subject_id"},
		{name: "unnamed stipulation", payload: map[string]any{"subject_id": subject, "stipulations": []any{map[string]any{"content": "x"}}},
			want: "stipulations[0].name is empty"},
		{name: "corrupt result among the inputs", payload: request(subject, "hello"),
			inputs: []pipeline.Output{{Index: 0, Type: "test.upstream", Data: corrupt}}, want: "output of function 0 (test.upstream)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := report()
			_, err := steps.Handler(newRunner(t, p, steps.NewMemoryStore())).Handle(t.Context(), handlerCall(1, tt.payload, tt.inputs...))
			if err == nil || !pipeline.IsPermanent(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want a permanent error mentioning %q", err, tt.want)
			}
			if c := p.counts(); c != [3]int64{} {
				t.Fatalf("the processor ran %v with a bad payload", c)
			}
		})
	}
}

// TestHandlerPayloadFromJSON builds the payload the way `nats req` does,
// from the JSON documented on Request, with a document as a string.
func TestHandlerPayloadFromJSON(t *testing.T) {
	var payload pipeline.Payload
	if err := json.Unmarshal([]byte(`{"subject_id": "UW-123",
		"stipulations": [{"name": "s_doc", "content": "{\"total\": 1}"}]}`), &payload); err != nil {
		t.Fatal(err)
	}
	call := &pipeline.Call{Index: 0, Type: "test.upstream", Payload: payload}
	res, err := steps.Handler(newRunner(t, upstream(), steps.NewMemoryStore())).Handle(t.Context(), call)
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeResult(t, res.Data); !got.Success || got.SubjectID != subject {
		t.Fatalf("output = %+v", got)
	}
}

// TestOutputRoundTrip: a Result or Stipulation goes into a pipeline.Result's
// Data as its JSON in one msgpack binary, and DecodeOutput gets it back.
func TestOutputRoundTrip(t *testing.T) {
	res := &steps.Result{
		RunID: "run-1", ProcessorName: "p_x", SubjectID: subject, Success: true,
		ExtractionOutput: steps.Extraction{"flags": map[string]any{"large": true}, "factors": map[string]any{"n": 3.0}},
		Context:          steps.ExecutionContext{ParentRunID: "run-1", Metadata: map[string]any{"input_hash": "abc"}},
		Timestamp:        time.Date(2025, 9, 3, 7, 13, 59, 0, time.UTC), DurationMS: 12,
	}
	stip := steps.Stipulation{Name: "s_doc", SubjectID: subject, Content: []byte{0, 1, 2, 0xff}}
	tests := []struct {
		name string
		in   steps.Input
		want steps.Input
	}{
		{"result", *res, res},
		{"result pointer", res, res},
		{"stipulation", stip, stip},
		{"stipulation pointer", &stip, stip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := steps.EncodeOutput(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			var raw []byte
			if err := msgpack.Unmarshal(data, &raw); err != nil || data[0] != 0xc4 && data[0] != 0xc5 {
				t.Fatalf("output is not a msgpack binary (first byte %#x, %v)", data[0], err)
			}
			if !json.Valid(raw) {
				t.Fatalf("output binary is not JSON: %q", raw)
			}
			got, err := steps.DecodeOutput(data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("round trip =\n%#v\nwant\n%#v", got, tt.want)
			}
		})
	}

	// A string holding the JSON decodes too.
	data := pipeline.MustPayload(`{"kind":"stipulation","name":"s_doc","subject_id":"UW-123","content":"aGk="}`)
	got, err := steps.DecodeOutput(data)
	if err != nil || !reflect.DeepEqual(got, steps.Stipulation{Name: "s_doc", SubjectID: subject, Content: []byte("hi")}) {
		t.Fatalf("DecodeOutput(string) = %#v, %v", got, err)
	}
}

func TestDecodeOutputSkipsOtherOutputs(t *testing.T) {
	tests := []struct {
		name string
		data pipeline.Payload
	}{
		{"empty", nil},
		{"msgpack nil", pipeline.MustPayload(nil)},
		{"msgpack map", pipeline.MustPayload(map[string]any{"kind": "result"})},
		{"msgpack number", pipeline.MustPayload(42)},
		{"binary, not JSON", pipeline.MustPayload([]byte{0xff, 0x00})},
		{"JSON array", pipeline.MustPayload([]byte(`[1,2]`))},
		{"JSON string", pipeline.MustPayload([]byte(`"result"`))},
		{"JSON object without kind", pipeline.MustPayload([]byte(`{"ok":true}`))},
		{"JSON object of another kind", pipeline.MustPayload([]byte(`{"kind":"invoice"}`))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := steps.DecodeOutput(tt.data); !errors.Is(err, steps.ErrUnknownInput) {
				t.Fatalf("err = %v, want ErrUnknownInput", err)
			}
		})
	}
	corrupt := pipeline.MustPayload([]byte(`{"kind":"result","success":"yes"}`))
	if _, err := steps.DecodeOutput(corrupt); err == nil || errors.Is(err, steps.ErrUnknownInput) {
		t.Fatalf("corrupt result: err = %v, want a decoding error", err)
	}
}

func TestEncodeOutputRejectsOtherInputs(t *testing.T) {
	for _, in := range []steps.Input{nil, "text", map[string]any{"kind": "result"}, (*steps.Result)(nil), (*steps.Stipulation)(nil)} {
		if _, err := steps.EncodeOutput(in); !errors.Is(err, steps.ErrUnknownInput) {
			t.Errorf("EncodeOutput(%#v): err = %v, want ErrUnknownInput", in, err)
		}
	}
}

func TestHandlerOfNilRunnerPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Handler(nil) did not panic")
		}
	}()
	steps.Handler(nil)
}
