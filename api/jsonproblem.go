package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// JSONProblem says what encoding/json found wrong in a request body, with
// the caller's input in it capped: a number literal or an unknown field's
// name can be as long as the body. authz answers a malformed request with
// it, and Calls.UnmarshalJSON words the error of one function with it.
func JSONProblem(err error) string {
	var te *json.UnmarshalTypeError
	var ve *pipeline.ValidationError
	switch {
	case errors.As(err, &ve):
		return err.Error() // capped where it was made
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "the body"
		}
		return fmt.Sprintf("%s: got %s, expected %s", field, logging.Capped(te.Value), te.Type)
	}
	msg := err.Error()
	const unknown = `json: unknown field "`
	if i := strings.Index(msg, unknown); i >= 0 {
		name := strings.TrimSuffix(msg[i+len(unknown):], `"`)
		msg = msg[:i] + unknown + logging.Capped(name) + `"`
	}
	return logging.Cap(msg, MaxErrorMessage)
}
