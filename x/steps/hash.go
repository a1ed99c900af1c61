package steps

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// InputHash returns the hex SHA-256 of a canonical encoding of inputs, the
// key of resume decisions: two runs resume one another only if their inputs
// hash alike.
//
// Each item is reduced to what determines a run's outcome:
//   - a Stipulation to its name, subject and the SHA-256 of its content;
//   - a Result to everything except the volatile run id, timestamp, duration
//     and context (so a dependency rerun with the same outcome hashes alike);
//   - any other value to its Go type name and its JSON encoding.
//
// The list is then encoded as JSON with object keys sorted at every level and
// numbers kept as written, so a Result hashes alike before and after a JSON
// round trip. Order matters: the same items in another order hash
// differently. It fails only if an item cannot be encoded as JSON.
func InputHash(inputs []Input) (string, error) {
	items := make([]any, len(inputs))
	for i, in := range inputs {
		switch v := in.(type) {
		case Stipulation:
			items[i] = hashStipulation(&v)
		case *Stipulation:
			items[i] = hashStipulation(v)
		case Result:
			items[i] = hashResult(&v)
		case *Result:
			items[i] = hashResult(v)
		default:
			items[i] = map[string]any{"kind": "other", "type": fmt.Sprintf("%T", in), "value": in}
		}
	}
	raw, err := json.Marshal(items)
	if err != nil {
		return "", fmt.Errorf("steps: hash inputs: %w", err)
	}
	// Decoding into any and encoding again sorts the keys of every object,
	// including those written from structs in field order.
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var canonical any
	if err := dec.Decode(&canonical); err != nil {
		return "", fmt.Errorf("steps: hash inputs: %w", err)
	}
	if raw, err = json.Marshal(canonical); err != nil {
		return "", fmt.Errorf("steps: hash inputs: %w", err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), nil
}

func hashStipulation(s *Stipulation) any {
	if s == nil {
		return nil
	}
	sum := sha256.Sum256(s.Content)
	return map[string]any{
		"kind":           KindStipulation,
		"name":           s.Name,
		"subject_id":     s.SubjectID,
		"content_sha256": hex.EncodeToString(sum[:]),
	}
}

func hashResult(r *Result) any {
	if r == nil {
		return nil
	}
	return map[string]any{
		"kind":              KindResult,
		"processor_name":    r.ProcessorName,
		"subject_id":        r.SubjectID,
		"success":           r.Success,
		"extraction_output": r.ExtractionOutput,
		"error":             r.Error,
	}
}
