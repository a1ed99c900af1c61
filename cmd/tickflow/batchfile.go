package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/pipeline"
	"go.yaml.in/yaml/v3"
)

// sendFields are the fields of a batch file: those of the send request.
var sendFields = []string{"label", "functions", "key", "idempotency_key", "run_at", "delay"}

// readBatchFile reads a send request from path ("-": in) as JSON, or as
// YAML when it does not start with '{'. Its fields are the send request's
// (label, functions, key, idempotency_key); anything else is refused, and a
// function reads as authz reads it, so an error names the field.
func readBatchFile(path string, in io.Reader) (*api.SendRequest, error) {
	var data []byte
	var err error
	name := path
	if path == "-" {
		name = "stdin"
		data, err = io.ReadAll(in)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, usage("read the batch: %v", err)
	}
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		if data, err = yamlToJSON(data); err != nil {
			return nil, usage("%s: not a batch in JSON or YAML: %v", name, err)
		}
	}
	return parseBatch(name, data)
}

// parseBatch reads a send request from JSON data, refusing any field the
// send request lacks; name says where it came from in an error.
func parseBatch(name string, data []byte) (*api.SendRequest, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, usage("%s: not a batch: %v; expected an object with %s", name, err, strings.Join(sendFields, ", "))
	}
	for f := range fields {
		switch {
		case f == "priority":
			return nil, usage("%s: priority: the label decides a batch's priority (its priority in the authorization table); a send cannot set it", name)
		case !slices.Contains(sendFields, f):
			return nil, usage("%s: unknown field %q; expected %s", name, f, strings.Join(sendFields, ", "))
		}
	}
	var req api.SendRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, usage("%s: %v", name, err)
	}
	return &req, nil
}

// yamlToJSON converts a YAML document to JSON.
func yamlToJSON(data []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	v, err := jsonValue(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// jsonValue makes what YAML decoded encodable as JSON: keys of mappings
// must be strings.
func jsonValue(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			c, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			t[k] = c
		}
		return t, nil
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("mapping key %v is a %T; expected a string", k, k)
			}
			c, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			out[ks] = c
		}
		return out, nil
	case []any:
		for i, e := range t {
			c, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			t[i] = c
		}
		return t, nil
	}
	return v, nil
}

// parseFunctions reads functions given as arguments: TYPE, or TYPE=PAYLOAD
// with the payload as JSON.
func parseFunctions(args []string) (api.Calls, error) {
	var calls api.Calls
	for i, a := range args {
		typ, payload, hasPayload := strings.Cut(a, "=")
		if typ == "" {
			return nil, usage("function %d %q: expected TYPE or TYPE=PAYLOAD (the payload as JSON)", i, a)
		}
		c := api.CallSpec{Type: typ}
		if hasPayload {
			if err := json.Unmarshal([]byte(payload), &c.Payload); err != nil {
				return nil, usage("function %d (%s): payload %s: %v; expected JSON, quoted for the shell, e.g. '%s={\"name\":\"ada\"}'", i, typ, strconv.Quote(payload), err, typ)
			}
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// applyExpects sets the confirmation content functions wait for, from
// INDEX=CONTENT.
func applyExpects(calls api.Calls, expects []string) error {
	for _, e := range expects {
		i, content, ok := strings.Cut(e, "=")
		n, err := strconv.Atoi(i)
		if !ok || err != nil {
			return usage("--expect %q: expected INDEX=CONTENT, the index of a function (from 0) and the confirmation content it waits for", e)
		}
		if n < 0 || n >= len(calls) {
			return usage("--expect %q: the batch has no function %d (it has %d, from 0)", e, n, len(calls))
		}
		calls[n].Expect = content
	}
	return nil
}

// payloadText is a payload as compact JSON, "-" when there is none.
func payloadText(p pipeline.Payload) string {
	if len(p) == 0 {
		return "-"
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Sprintf("(%d bytes that do not read: %v)", len(p), err)
	}
	return string(b)
}
