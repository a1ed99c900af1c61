package underwriting

import (
	"bytes"
	"encoding/json"

	"github.com/tickflow/tickflow/x/steps"
)

// decodeDocument decodes the JSON content of stipulation name into v,
// recording a problem if it is missing, empty or not the expected JSON.
func decodeDocument(p *problems, in steps.Inputs, name string, v any) bool {
	doc, ok := in.Stipulation(name)
	switch {
	case !ok:
		p.add(name, "is missing from the inputs")
		return false
	case len(bytes.TrimSpace(doc.Content)) == 0:
		p.add(name, "is empty; want a JSON document")
		return false
	}
	if err := json.Unmarshal(doc.Content, v); err != nil {
		p.add(name, "is not the expected JSON document: %v", err)
		return false
	}
	return true
}
