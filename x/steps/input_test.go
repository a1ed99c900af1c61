package steps_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tickflow/tickflow/x/steps"
)

func TestDecodeInputRoundTrip(t *testing.T) {
	p := newCounting()
	p.failAt(steps.StepExtraction, 1)
	r := newRunner(t, p, steps.NewMemoryStore())
	failed := r.Execute(t.Context(), subject, []steps.Input{doc(subject, "x")}, &steps.ExecutionContext{Metadata: map[string]any{"tenant": "acme"}})
	succeeded := r.Execute(t.Context(), subject, []steps.Input{doc(subject, "x")}, nil)

	for _, res := range []*steps.Result{failed, succeeded} {
		raw, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		in, err := steps.DecodeInput(raw)
		if err != nil {
			t.Fatalf("DecodeInput(%s): %v", raw, err)
		}
		got, ok := in.(*steps.Result)
		if !ok {
			t.Fatalf("DecodeInput returned %T, want *steps.Result", in)
		}
		again, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if json.Unmarshal(again, &a) != nil || json.Unmarshal(raw, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("re-encoded\n%s\nwant\n%s", again, raw)
		}
		if got.Success != res.Success || got.RunID != res.RunID || !got.Timestamp.Equal(res.Timestamp) {
			t.Errorf("decoded %+v, want %+v", got, res)
		}
		if (got.Err() == nil) != res.Success || (got.Err() != nil && !errors.Is(got.Err(), steps.ErrStepFailed)) {
			t.Errorf("decoded Err() = %v", got.Err())
		}
	}

	s := doc(subject, "\x00binary\xff")
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	in, err := steps.DecodeInput(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, steps.Input(s)) {
		t.Errorf("DecodeInput = %#v, want %#v", in, s)
	}
}

func TestEncodedShape(t *testing.T) {
	res := steps.Result{RunID: "r", ProcessorName: "p_x", SubjectID: "UW-1", Success: true,
		ExtractionOutput: steps.Extraction{}, Context: steps.ExecutionContext{ParentRunID: "r"},
		Timestamp: time.Date(2025, 9, 3, 7, 13, 59, 0, time.UTC), DurationMS: 12}
	for _, v := range []any{res, &res} {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		const want = `{"kind":"result","run_id":"r","processor_name":"p_x","subject_id":"UW-1","extraction_output":{},` +
			`"success":true,"context":{"parent_run_id":"r","retry_count":0},"timestamp":"2025-09-03T07:13:59Z","duration":12}`
		if string(raw) != want {
			t.Errorf("json.Marshal(%T) =\n%s\nwant\n%s", v, raw, want)
		}
	}
	raw, err := json.Marshal(steps.Stipulation{Name: "s_x", SubjectID: "UW-1", Content: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"kind":"stipulation","name":"s_x","subject_id":"UW-1","content":"aGk="}`; string(raw) != want {
		t.Errorf("stipulation = %s, want %s", raw, want)
	}
}

func TestDecodeInputRejects(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		wantErr error // nil: any error
	}{
		{"no kind", `{"name":"s_x"}`, steps.ErrUnknownInput},
		{"unknown kind", `{"kind":"invoice"}`, steps.ErrUnknownInput},
		{"not JSON", `{`, nil},
		{"not an object", `[]`, nil},
		{"bad field", `{"kind":"stipulation","content":"not base64!"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := steps.DecodeInput([]byte(tt.data))
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("DecodeInput = %v, %v; want error %v", in, err, tt.wantErr)
			}
		})
	}
	var r steps.Result
	if err := json.Unmarshal([]byte(`{"kind":"stipulation"}`), &r); !errors.Is(err, steps.ErrUnknownInput) {
		t.Errorf("decoding a stipulation as a Result: err = %v, want ErrUnknownInput", err)
	}
	var s steps.Stipulation
	if err := json.Unmarshal([]byte(`{"kind":"result"}`), &s); !errors.Is(err, steps.ErrUnknownInput) {
		t.Errorf("decoding a result as a Stipulation: err = %v, want ErrUnknownInput", err)
	}
	if err := json.Unmarshal([]byte(`{"name":"s_x","subject_id":"UW-1"}`), &s); err != nil || s.Name != "s_x" {
		t.Errorf("decoding a Stipulation without kind: %v, %+v", err, s)
	}
}

func TestInputsLookups(t *testing.T) {
	res := &steps.Result{ProcessorName: "p_form"}
	s := doc(subject, "x")
	in := steps.Inputs{SubjectID: subject, Items: []steps.Input{"noise", &s, *res}}
	if got, ok := in.Stipulation("s_doc"); !ok || string(got.Content) != "x" {
		t.Errorf("Stipulation(s_doc) = %+v, %v", got, ok)
	}
	if _, ok := in.Stipulation("s_none"); ok {
		t.Error("Stipulation(s_none) found")
	}
	if got, ok := in.Result("p_form"); !ok || got.ProcessorName != "p_form" {
		t.Errorf("Result(p_form) = %+v, %v", got, ok)
	}
	if _, ok := in.Result("p_none"); ok {
		t.Error("Result(p_none) found")
	}
}
