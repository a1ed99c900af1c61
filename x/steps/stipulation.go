package steps

import (
	"encoding/json"
	"fmt"
)

// Stipulation is a document supplied for a subject (a document
// stipulation; SubjectID is its underwriting id). Its Name is the
// dependency name processors declare, e.g. "s_bank_statement".
type Stipulation struct {
	Name      string `json:"name"`
	SubjectID string `json:"subject_id"`
	// Content is the document itself; it encodes to JSON as base64.
	Content []byte `json:"content"`
}

// stipulationJSON has Stipulation's fields without its methods.
type stipulationJSON Stipulation

// MarshalJSON encodes s with "kind": "stipulation", so DecodeInput can tell
// it from a Result.
func (s Stipulation) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Kind string `json:"kind"`
		stipulationJSON
	}{KindStipulation, stipulationJSON(s)})
}

// UnmarshalJSON decodes what MarshalJSON wrote. A "kind" other than
// "stipulation" is an error wrapping ErrUnknownInput; a missing one is
// accepted.
func (s *Stipulation) UnmarshalJSON(data []byte) error {
	var v struct {
		Kind string `json:"kind"`
		stipulationJSON
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("steps: decode stipulation: %w", err)
	}
	if err := checkKind(v.Kind, KindStipulation); err != nil {
		return err
	}
	*s = Stipulation(v.stipulationJSON)
	return nil
}
