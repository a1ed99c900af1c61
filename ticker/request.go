package ticker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// DefaultFlushTimeout bounds the flush after a single tick (TickOnce, Run
// with Once) when the caller's context has no deadline.
const DefaultFlushTimeout = 5 * time.Second

// DefaultRequestTimeout bounds Request when the caller's context has no
// deadline. A tick may run many steps, each a worker call, so it is longer
// than a plain round trip needs.
const DefaultRequestTimeout = 30 * time.Second

// TickOnce publishes one tick to domain asking for steps steps (0 or 1: an
// empty body, one step) and flushes nc, so on a nil return the server has
// the tick. The flush is bounded by ctx, or by DefaultFlushTimeout when ctx
// has no deadline. Bad arguments match ErrInvalid; a tick the server denied
// for permissions matches nats.ErrPermissionViolation.
//
// Core NATS gives no acknowledgement: a tick no processor is subscribed to
// is dropped without an error. Use Request to learn what a tick did.
func TickOnce(ctx context.Context, nc *nats.Conn, domain string, steps int) error {
	if err := checkArgs(nc, domain, steps); err != nil {
		return err
	}
	before := nc.LastError()
	subj := streams.TickSubject(domain)
	if err := nc.Publish(subj, body(steps)); err != nil {
		return fmt.Errorf("ticker: publish tick to %s: %w", subj, err)
	}
	return flush(ctx, nc, before, []string{domain})
}

// Request sends one tick to domain as a request, asking for steps steps (0
// or 1: one step), and returns the report of the processor replica that ran
// it. The wait is bounded by ctx, or by DefaultRequestTimeout when ctx has
// no deadline.
//
// A report whose Status is api.TickError is returned with a nil
// error: the tick was delivered and the report says what went wrong. When
// nobody answers, the error matches ErrNoAnswer and says "no processor
// answered for domain <domain> within <d>" (or that no processor is
// subscribed). An answer that is not a report matches ErrBadReport. Bad
// arguments match ErrInvalid. A processor that is shutting down answers
// 503, which matches ErrStopping.
func Request(ctx context.Context, nc *nats.Conn, domain string, steps int) (api.TickReport, error) {
	if err := checkArgs(nc, domain, steps); err != nil {
		return api.TickReport{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultRequestTimeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	within := time.Until(deadline).Round(time.Millisecond)
	subj := streams.TickSubject(domain)
	m, err := nc.RequestWithContext(ctx, subj, body(steps))
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return api.TickReport{}, fmt.Errorf("%w for domain %s: nothing is subscribed to %s; is a processor for %s running? (%w)", ErrNoAnswer, domain, subj, domain, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return api.TickReport{}, fmt.Errorf("%w for domain %s within %s: %w", ErrNoAnswer, domain, within, err)
	case err != nil:
		return api.TickReport{}, fmt.Errorf("ticker: tick request to %s: %w", subj, err)
	}
	if m.Header.Get(micro.ErrorCodeHeader) == streams.CodeStopping {
		return api.TickReport{}, fmt.Errorf("%w for domain %s: %s", ErrStopping, domain, logging.Capped(m.Header.Get(micro.ErrorHeader)))
	}
	var rep api.TickReport
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return api.TickReport{}, fmt.Errorf("%w from domain %s: expected a JSON processor report, got %q: %w", ErrBadReport, domain, m.Data, err)
	}
	if rep.Status == "" {
		// A processor that cannot read the tick answers {"error": "…"}.
		if rep.Error != "" {
			return rep, fmt.Errorf("%w from domain %s: the processor rejected the tick: %s", ErrBadReport, domain, rep.Error)
		}
		return rep, fmt.Errorf("%w from domain %s: the answer has no status: %q", ErrBadReport, domain, m.Data)
	}
	return rep, nil
}

func checkArgs(nc *nats.Conn, domain string, steps int) error {
	if nc == nil {
		return fmt.Errorf("%w: the NATS connection is nil", ErrInvalid)
	}
	if err := pipeline.ValidateDomain(domain); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if steps < 0 {
		return fmt.Errorf("%w: steps: must be ≥ 1, or 0 for the default 1 (got %d)", ErrInvalid, steps)
	}
	return nil
}

// body is the tick body asking for steps: empty for one step, which is what
// `nats pub tick.<domain> ""` sends too.
func body(steps int) []byte {
	if steps <= 1 {
		return nil
	}
	return []byte(strconv.Itoa(steps))
}

// flush waits until the server has processed everything nc published, and
// reports a permissions violation the server raised for one of the domains'
// tick subjects since before was read from nc.LastError. The server answers
// the flush's PING only after the publishes before it, so their -ERR, if
// any, has arrived by the time the flush returns.
func flush(ctx context.Context, nc *nats.Conn, before error, domains []string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultFlushTimeout)
		defer cancel()
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("ticker: flush after tick: %w", err)
	}
	after := nc.LastError()
	if after == nil || same(after, before) || !errors.Is(after, nats.ErrPermissionViolation) {
		return nil
	}
	for _, d := range domains {
		if strings.Contains(after.Error(), `"`+streams.TickSubject(d)+`"`) {
			return fmt.Errorf("ticker: the server denied the tick to %s: %w", streams.TickSubject(d), after)
		}
	}
	return nil
}

// same reports whether a and b are the same error value, without the panic
// == raises on errors of a non-comparable type.
func same(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}
