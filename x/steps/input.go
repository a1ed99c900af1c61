package steps

import (
	"encoding/json"
	"fmt"
)

// Input is one item a processor consumes. A Stipulation or a Result (by
// value or pointer) is identified by name and subject for the dependency
// check; any other value is passed through to Validate unidentified, and
// takes part in InputHash through its JSON encoding.
type Input any

// Inputs is what Validate receives: the run's subject and its input items,
// in the order given to Execute.
type Inputs struct {
	SubjectID string
	Items     []Input
}

// Stipulation returns the first stipulation named name among the items.
func (in Inputs) Stipulation(name string) (Stipulation, bool) {
	for _, it := range in.Items {
		switch s := it.(type) {
		case Stipulation:
			if s.Name == name {
				return s, true
			}
		case *Stipulation:
			if s != nil && s.Name == name {
				return *s, true
			}
		}
	}
	return Stipulation{}, false
}

// Result returns the first result of the processor named processorName
// ("p_..." form) among the items.
func (in Inputs) Result(processorName string) (*Result, bool) {
	for _, it := range in.Items {
		switch r := it.(type) {
		case Result:
			if r.ProcessorName == processorName {
				return &r, true
			}
		case *Result:
			if r != nil && r.ProcessorName == processorName {
				return r, true
			}
		}
	}
	return nil, false
}

// Input kinds, the "kind" field of an encoded Result or Stipulation.
const (
	KindResult      = "result"
	KindStipulation = "stipulation"
)

// DecodeInput decodes a JSON-encoded Result (returned as *Result) or
// Stipulation (returned as Stipulation), told apart by their "kind" field,
// as written by their MarshalJSON. Anything else is an error wrapping
// ErrUnknownInput.
func DecodeInput(data []byte) (Input, error) {
	var probe struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("steps: decode input: %w", err)
	}
	switch probe.Kind {
	case KindResult:
		r := new(Result)
		if err := json.Unmarshal(data, r); err != nil {
			return nil, err
		}
		return r, nil
	case KindStipulation:
		var s Stipulation
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, err
		}
		return s, nil
	default:
		return nil, fmt.Errorf("%w: %q (want %q or %q)", ErrUnknownInput, probe.Kind, KindResult, KindStipulation)
	}
}

// checkKind accepts a missing kind (the caller knows the type) or want.
func checkKind(got, want string) error {
	if got != "" && got != want {
		return fmt.Errorf("%w: %q (want %q)", ErrUnknownInput, got, want)
	}
	return nil
}
