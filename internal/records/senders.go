package records

import (
	"strconv"
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// SenderPool is the value of a domain's key in the senders bucket: every
// sender of the domain, free or leased to one batch. Package senderlease
// keeps it (senderlease.Acquire, senderlease.Release).
type SenderPool struct {
	V       uint8    `msgpack:"v" json:"v"`
	Domain  string   `msgpack:"domain" json:"domain"`
	Senders []Sender `msgpack:"senders" json:"senders"`
}

// Sender is one sender of a pool and its lease. It holds the sender's name
// only: its secret stays in the workers' configuration.
type Sender struct {
	Name string `msgpack:"name" json:"name"`
	// Batch is the batch holding the sender; 0 when it is free.
	Batch uint64 `msgpack:"batch,omitempty" json:"batch,omitempty"`
	// Key is the holding batch's key; empty for an unkeyed batch.
	Key string `msgpack:"key,omitempty" json:"key,omitempty"`
	// Since is when the sender was leased, or freed.
	Since time.Time `msgpack:"since" json:"since"`
	// Processor is the replica that leased it.
	Processor string `msgpack:"processor,omitempty" json:"processor,omitempty"`
	// Submitter is who submitted the holding batch; it counts against
	// that submitter's share of the pool.
	Submitter string `msgpack:"submitter,omitempty" json:"submitter,omitempty"`
}

// Free reports whether no batch holds the sender.
func (s *Sender) Free() bool { return s.Batch == 0 }

// Holder is what the sender is bound to: the batch's key, or "batch <id>"
// for an unkeyed batch; empty when free.
func (s *Sender) Holder() string {
	switch {
	case s.Free():
		return ""
	case s.Key != "":
		return s.Key
	}
	return "batch " + strconv.FormatUint(s.Batch, 10)
}

func (p *SenderPool) version() uint8 { return p.V }
func (p *SenderPool) setVersion()    { p.V = WireVersion }

// InclusionCall is the part of a work request about a function waiting for
// inclusion: a poll asks about Ref; a hook request names the hook.
type InclusionCall struct {
	// Ref is what the function dispatched (pipeline.Result.Ref).
	Ref string `msgpack:"ref,omitempty"`
	// Hook is HookSuccess or HookFailure on a hook request, empty on a poll.
	Hook string `msgpack:"hook,omitempty"`
	// Output is the function's result, for the success hook.
	Output *pipeline.Output `msgpack:"output,omitempty"`
}

// The hooks of a function waiting for inclusion.
const (
	HookSuccess = "success"
	HookFailure = "failure"
)
