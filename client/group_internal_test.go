package client

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/pipeline"
)

// TestNotStartedOnlyForBatchesAuthzDidNotStart: a grouped send is sent
// again alone only when authz says it did not start it; a batch that
// failed on its own (a 503 that may have recorded it) is answered with
// that failure, never sent twice.
func TestNotStartedOnlyForBatchesAuthzDidNotStart(t *testing.T) {
	for _, tc := range []struct {
		r    api.SendManyResult
		want bool
	}{
		{api.SendManyResult{Code: api.CodeUnavailable, Error: api.NotSubmitted + "batch 3 of this request failed inside authz; send this one again"}, true},
		{api.SendManyResult{Code: api.CodeUnavailable, Error: "authz: batch 12 is recorded, but its token could not be published yet"}, false},
		{api.SendManyResult{Code: api.CodeInternal, Error: api.NotSubmitted + "batch 3"}, false},
		{api.SendManyResult{ID: 7}, false},
	} {
		if got := notStarted(&tc.r); got != tc.want {
			t.Errorf("notStarted(%+v) = %v, want %v", tc.r, got, tc.want)
		}
	}
}

// TestSendErrNamesTheSend: a group's error reaches each of its sends as
// the send's, matching the same sentinels.
func TestSendErrNamesTheSend(t *testing.T) {
	err := sendErr(&Error{Op: api.OpSendMany, Code: api.CodeInternal, Message: "authz: boom"})
	var e *Error
	if !errors.As(err, &e) || e.Op != api.OpSend || e.Code != api.CodeInternal || e.Message != "authz: boom" {
		t.Fatalf("sendErr: %#v", err)
	}
	plain := errors.New("client: send_many: something")
	if sendErr(plain) != plain {
		t.Fatalf("a non-API error changed: %v", sendErr(plain))
	}
}

// TestEncodedRequestsAreEncodingJSONs: the client's send and send_many
// requests are byte for byte what encoding/json writes, whether or not
// they take the path without reflection.
func TestEncodedRequestsAreEncodingJSONs(t *testing.T) {
	plain := api.SendRequest{Label: "payments", Functions: api.Calls{{Type: "charge", Payload: pipeline.MustPayload(map[string]any{"amount": 12})}}}
	escaped := api.SendRequest{Label: "payments", Functions: api.Calls{{Type: "charge"}}, Key: `order "7"`}
	for _, req := range []api.SendRequest{plain, escaped} {
		got, err := encodeSend(&req)
		want, werr := json.Marshal(req)
		if err != nil || werr != nil || string(got) != string(want) {
			t.Errorf("send %+v: encoded %s (%v), encoding/json writes %s (%v)", req, got, err, want, werr)
		}
	}
	for _, req := range []api.SendManyRequest{
		{Batches: []api.SendRequest{plain, plain}},
		{Batches: []api.SendRequest{plain, escaped}},
		{Batches: []api.SendRequest{}},
		{},
	} {
		got, err := encodeSendMany(&req)
		want, werr := json.Marshal(req)
		if err != nil || werr != nil || string(got) != string(want) {
			t.Errorf("send_many %+v: encoded %s (%v), encoding/json writes %s (%v)", req, got, err, want, werr)
		}
	}
}
