package api

import (
	"time"

	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// MaxSendMany is the most batches one send_many request may carry.
const MaxSendMany = 1000

// MaxSendManyError bounds the message of one batch's error in a
// SendManyReply, in bytes, so that a reply of MaxSendMany errors stays well
// inside the server's default payload limit (1 MiB).
const MaxSendManyError = 8 * logging.CapBytes

// NotSubmitted begins the error of a send_many result whose batch authz
// did not start, after a failure inside authz stopped the request (code
// CodeUnavailable): nothing of the batch was written, and it may be sent
// again as it is.
const NotSubmitted = "authz: not submitted: "

// SendManyRequest submits many batches in one request: each is what one
// send request would carry, and is submitted as that request would be,
// in order. The batches are independent: one refused does not stop the
// others, and no batch waits for another's outcome.
type SendManyRequest struct {
	Batches []SendRequest `json:"batches"`
}

// SendManyReply answers a SendManyRequest with one result per batch, in
// the request's order.
type SendManyReply struct {
	Results []SendManyResult `json:"results"`
}

// SendManyResult is one batch's answer: what send would have replied, or,
// when Code is set, why the batch was not queued. A batch not queued left
// nothing behind; sent again, it is a new submission (or, with the same
// idempotency key, the same one).
type SendManyResult struct {
	// ID, Domain, Priority, Duplicate and RunAt are SendReply's, set when
	// the batch was queued (Reply). They are not an embedded SendReply:
	// its UnmarshalJSON would be promoted and read the whole result.
	ID        uint64            `json:"id,omitempty"`
	Domain    string            `json:"domain,omitempty"`
	Priority  pipeline.Priority `json:"priority,omitempty"`
	Duplicate bool              `json:"duplicate,omitempty"`
	RunAt     time.Time         `json:"run_at,omitzero"`
	// Code is the error's code (the codes of an error reply), 0 when the
	// batch was queued.
	Code int `json:"code,omitempty"`
	// Error says what was wrong, at most MaxSendManyError bytes.
	Error string `json:"error,omitempty"`
}

// Queued is the result of a batch queued as send replied rep.
func Queued(rep *SendReply) SendManyResult {
	return SendManyResult{ID: rep.ID, Domain: rep.Domain, Priority: rep.Priority, Duplicate: rep.Duplicate, RunAt: rep.RunAt}
}

// Reply is the result as send's reply; nil when the batch was not queued.
func (r *SendManyResult) Reply() *SendReply {
	if r.Failed() {
		return nil
	}
	return &SendReply{ID: r.ID, Domain: r.Domain, Priority: r.Priority, Duplicate: r.Duplicate, RunAt: r.RunAt}
}

// Failed reports whether the batch was not queued.
func (r *SendManyResult) Failed() bool { return r.Code != 0 }
