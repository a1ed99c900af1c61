package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// Spec is one batch a client submits: a label and one chaos.record step
// per function.
type Spec struct {
	Label string
	Steps []Step
}

// Atomic reports whether the label runs the batch as one unit.
func (s Spec) Atomic() bool { return s.Label == LabelAtomic }

// Expected is the outcome the batch's steps call for: the first step that
// fails for good ends it (an atomic batch entirely); retryable failures are
// retried and succeed.
func (s Spec) Expected() pipeline.Outcome {
	for i, st := range s.Steps {
		if !st.Fail {
			continue
		}
		if s.Atomic() {
			return pipeline.Outcome{Status: pipeline.Rejected}
		}
		return pipeline.FailedAfter(i, "")
	}
	return pipeline.ExecutedOutcome(len(s.Steps))
}

// Submission is a batch a client submits, with its idempotency key, and
// what authz answered.
type Submission struct {
	Key  string
	User string
	Spec Spec
	// Plain sends it without its idempotency key (Key only names it
	// here): it is sent again only when the request cannot have reached
	// authz, and an answer that does not come (or says authz failed)
	// leaves it Unanswered: recorded or not, nobody knows, and if it was
	// recorded it must still finish.
	Plain bool
	// ID is the batch id authz answered, once Accepted.
	ID         uint64
	Accepted   bool
	Unanswered bool
	// Tries counts the requests it took.
	Tries int
}

// requestTimeout bounds one send request; a submission is retried with
// the same idempotency key until it is accepted.
const requestTimeout = 3 * time.Second

// transient reports whether a request failed for a reason that trying
// again with the same idempotency key can cure: no answer in time, nobody
// serving, or the connection down or reconnecting (a publish made then fails
// at once: connections keep no reconnect buffer).
func transient(err error) bool {
	for _, e := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders,
		nats.ErrConnectionClosed, nats.ErrDisconnected, nats.ErrConnectionReconnecting, nats.ErrReconnectBufExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// unsent reports whether a request that failed cannot have reached authz:
// nobody served it, or the connection, reconnecting, sent nothing.
func unsent(err error) bool {
	for _, e := range []error{nats.ErrNoResponders, nats.ErrConnectionReconnecting, nats.ErrReconnectBufExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// retryPause is how long a client waits before trying again.
const retryPause = 200 * time.Millisecond

// Submit sends s to authz through nc until it is accepted or ctx ends:
// a timeout, no responder (authz down), an internal error or a conflict is
// retried with the same idempotency key; a refusal that retrying cannot
// mend is ErrRejected.
func Submit(ctx context.Context, nc *nats.Conn, s *Submission) error {
	req := api.SendRequest{Label: s.Spec.Label, IdempotencyKey: s.Key}
	if s.Plain {
		req.IdempotencyKey = ""
	}
	for _, st := range s.Spec.Steps {
		p, err := pipeline.EncodePayload(st)
		if err != nil {
			return err
		}
		req.Functions = append(req.Functions, api.CallSpec{Type: TypeRecord, Payload: p})
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	subject := streams.AuthzSubject(s.User, api.OpSend)
	for {
		s.Tries++
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		m, err := nc.RequestWithContext(rctx, subject, body)
		cancel()
		if err == nil {
			code := m.Header.Get(micro.ErrorCodeHeader)
			switch code {
			case "":
				var rep api.SendReply
				if err := json.Unmarshal(m.Data, &rep); err != nil {
					return fmt.Errorf("chaos: send reply %q: %w", capped(string(m.Data)), err)
				}
				s.ID, s.Accepted = rep.ID, true
				return nil
			case strconv.Itoa(api.CodeConflict), strconv.Itoa(api.CodeInternal), strconv.Itoa(api.CodeUnavailable):
				if s.Plain {
					s.Unanswered = true // it may be recorded: not sent again
					return nil
				}
			default:
				return fmt.Errorf("%w: %s %s", ErrRejected, code, m.Header.Get(micro.ErrorHeader))
			}
		} else if ctx.Err() != nil {
			return ctx.Err()
		} else if !transient(err) {
			return fmt.Errorf("chaos: send: %w", err)
		} else if s.Plain && !unsent(err) {
			s.Unanswered = true // it may be recorded: not sent again
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryPause):
		}
	}
}

// SubmitAll submits every submission through clients goroutines, one
// connection per user, spreading the starts evenly over spread, and returns
// when all are accepted, one is rejected, or ctx ends.
func SubmitAll(ctx context.Context, conns map[string]*nats.Conn, subs []*Submission, clients int, spread time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan *Submission)
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for c := range clients {
		wg.Go(func() {
			for s := range next {
				if err := Submit(ctx, conns[s.User], s); err != nil {
					errs[c] = fmt.Errorf("batch %s: %w", s.Key, err)
					cancel()
					return
				}
			}
		})
	}
	var gap time.Duration
	if len(subs) > 1 {
		gap = spread / time.Duration(len(subs))
	}
	start := time.Now()
feed:
	for i, s := range subs {
		if wait := time.Until(start.Add(time.Duration(i) * gap)); wait > 0 {
			select {
			case <-ctx.Done():
				break feed
			case <-time.After(wait):
			}
		}
		select {
		case next <- s:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}
