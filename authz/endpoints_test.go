package authz_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
)

// TestOwnerOnlyEndpoints: the service advertises an endpoint for every
// operation of package api and no other; the endpoint table says which
// operations are the owner's, the service advertises it, and every one of
// them refuses any other caller with 403 before reading the body — so an
// owner operation added to the table cannot forget its check.
func TestOwnerOnlyEndpoints(t *testing.T) {
	b := setup(t)
	admin := b.env.Conn(t, "admin")
	m, err := admin.Request("$SRV.INFO."+streams.AuthzService, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatal(err)
	}
	owners := 0
	var ops []string
	for _, e := range info.Endpoints {
		op := e.Subject[strings.LastIndex(e.Subject, ".")+1:]
		ops = append(ops, op)
		ownerOnly := strings.HasSuffix(e.Metadata["description"], "(owner)")
		_, ae := b.raw(t, "alice", op, []byte(`{"not a field": true}`))
		switch {
		case ownerOnly:
			owners++
			if ae == nil || ae.Code != "403" {
				t.Errorf("%s is the owner's, but alice got %+v", op, ae)
			}
		case ae != nil && ae.Code == "403":
			t.Errorf("%s is open to callers, but alice got %+v", op, ae)
		}
	}
	want := []string{api.OpSend, api.OpSendMany, api.OpBatch, api.OpConfirm, api.OpQueue, api.OpPause, api.OpResume, api.OpEvict,
		api.OpInsert, api.OpDLQ, api.OpReplay, api.OpPurge, api.OpReload, api.OpKeys, api.OpSenders, api.OpDomains,
		api.OpInFlight, api.OpPresence, api.OpList, api.OpCancel, api.OpSchedules, api.OpPauseSchedule, api.OpResumeSchedule}
	slices.Sort(ops)
	slices.Sort(want)
	if !slices.Equal(ops, want) {
		t.Errorf("endpoints %v, want the api's operations %v", ops, want)
	}
	if owners != 17 {
		t.Fatalf("%d owner-only endpoints advertised, want 17 (queue, pause, resume, evict, insert, dlq, replay, purge, reload, keys, senders, domains, inflight, presence, schedules, pause_schedule, resume_schedule)", owners)
	}
}
