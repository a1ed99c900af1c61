package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// A function that waits for inclusion is served on two more endpoints of
// its type: a poll (a read, run every time it is asked) and its hooks (run
// once per function: claimed and recorded like a function's call, under
// streams.HookResultKey). Both answer NoHook for a handler that does not
// implement them, so the processor tells "no hook" from "no worker".

// addInclusion registers the poll and hook endpoints of typ.
func (w *Worker) addInclusion(add func(name, subject string, h endpoint) error, typ, name string) error {
	if err := add("poll-"+name, streams.PollSubject(typ), endpoint{run: w.poll, key: func(*records.WorkRequest) string { return "" }}); err != nil {
		return fmt.Errorf("worker: poll endpoint %s: %w", typ, err)
	}
	if err := add("hook-"+name, streams.HookSubject(typ), endpoint{run: w.hook, key: hookKey}); err != nil {
		return fmt.Errorf("worker: hook endpoint %s: %w", typ, err)
	}
	return nil
}

func hookKey(req *records.WorkRequest) string {
	if len(req.Calls) != 1 || req.Inclusion == nil || req.Inclusion.Hook == "" {
		return ""
	}
	return streams.HookResultKey(req.BatchID, req.Calls[0].Index, req.Inclusion.Hook)
}

func noHook(req *records.WorkRequest, index int, what string) *records.WorkReply {
	r := failure(req, index, pipeline.Permanent(fmt.Errorf("worker: the handler of %q has no %s", req.Calls[0].Type, what)))
	r.Error.NoHook = true
	return r
}

// poll asks the handler's Poller whether what the function dispatched was
// included: Included, a failure (classified under the request's retry
// logic), or neither while it cannot tell.
func (w *Worker) poll(ctx context.Context, req *records.WorkRequest) *records.WorkReply {
	if len(req.Calls) != 1 || req.Inclusion == nil {
		return failure(req, 0, pipeline.Permanent(errors.New("worker: a poll request carries one call and its dispatch reference")))
	}
	c := req.Calls[0]
	raw, _ := w.mux.Raw(c.Type)
	p, ok := raw.(pipeline.Poller)
	if !ok {
		return noHook(req, c.Index, "Poll")
	}
	included, err := safeRun(ctx, c.Type, func() (bool, error) {
		return p.Poll(ctx, w.withSender(callFor(req, c, req.Inputs), req), req.Inclusion.Ref)
	})
	switch {
	case err != nil:
		return failure(req, c.Index, err)
	case included:
		return &records.WorkReply{Included: true}
	}
	return &records.WorkReply{}
}

// hook calls the success or failure hook of a function waiting for
// inclusion, once: a repeated request is answered from its record. The
// hook's error is logged; it changes nothing.
func (w *Worker) hook(ctx context.Context, req *records.WorkRequest) *records.WorkReply {
	key := hookKey(req)
	if key == "" || (req.Inclusion.Hook == records.HookFailure && req.Failure == nil) {
		return failure(req, 0, pipeline.Permanent(errors.New("worker: a hook request carries one call and names its hook (a failure hook, its failure)")))
	}
	c := req.Calls[0]
	raw, _ := w.mux.Raw(c.Type)
	call := w.withSender(callFor(req, c, req.Inputs), req)
	var run func() error
	switch req.Inclusion.Hook {
	case records.HookSuccess:
		h, ok := raw.(pipeline.SuccessHook)
		if !ok {
			return noHook(req, c.Index, "OnSuccess")
		}
		var res pipeline.Result
		if o := req.Inclusion.Output; o != nil {
			res = pipeline.Result{Data: o.Data, Ref: o.Ref}
		}
		run = func() error { return h.OnSuccess(ctx, call, res) }
	case records.HookFailure:
		h, ok := raw.(pipeline.FailureHook)
		if !ok {
			return noHook(req, c.Index, "OnFailure")
		}
		run = func() error { return h.OnFailure(ctx, call, *req.Failure) }
	default:
		return failure(req, c.Index, pipeline.Permanent(fmt.Errorf("worker: unknown hook %q: expected %q or %q", capMessage(req.Inclusion.Hook), records.HookSuccess, records.HookFailure)))
	}
	return w.once(ctx, req, key, func() *records.WorkReply {
		if _, err := safeRun(ctx, c.Type, func() (bool, error) { return false, run() }); err != nil {
			w.log.Warn("hook failed", "hook", req.Inclusion.Hook, "batch_id", req.BatchID, "index", c.Index, "err", capMessage(err.Error()))
		}
		return &records.WorkReply{}
	})
}

// safeRun runs fn and turns a panic into a permanent error.
func safeRun(ctx context.Context, typ string, fn func() (bool, error)) (ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = pipeline.Permanent(fmt.Errorf("worker: handler %q panicked: %v\n%s", typ, r, debug.Stack()))
		}
	}()
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return fn()
}

// withSender gives the call the sender its batch holds, with its secret
// resolved from this worker's references on demand.
func (w *Worker) withSender(call *pipeline.Call, req *records.WorkRequest) *pipeline.Call {
	if req.Sender == "" {
		return call
	}
	call.Sender = req.Sender
	domain, name := req.Domain, req.Sender
	call.SenderSecret = func() ([]byte, error) {
		ref, ok := w.opts.Senders[domain][name]
		if !ok {
			return nil, fmt.Errorf("%w: this worker has no secret reference for sender %q of domain %s", ErrSecretRef, name, domain)
		}
		return ResolveSecret(ref)
	}
	return call
}

// Prefixes of a secret reference.
const (
	secretEnv  = "env:"
	secretFile = "file:"
)

// ValidateSecretRef checks a sender's secret reference: "env:NAME" (an
// environment variable) or "file:/path" (a file, its content trimmed of
// surrounding white space). It never reads the secret.
func ValidateSecretRef(ref string) error {
	switch {
	case strings.HasPrefix(ref, secretEnv) && len(ref) > len(secretEnv):
		return nil
	case strings.HasPrefix(ref, secretFile) && len(ref) > len(secretFile):
		return nil
	}
	return fmt.Errorf("%w: reference %q: expected env:NAME or file:/path", ErrSecretRef, capMessage(ref))
}

// ResolveSecret reads the secret a reference points at (ValidateSecretRef).
// Its errors name the reference, never the secret.
func ResolveSecret(ref string) ([]byte, error) {
	if err := ValidateSecretRef(ref); err != nil {
		return nil, err
	}
	if name, ok := strings.CutPrefix(ref, secretEnv); ok {
		v, set := os.LookupEnv(name)
		if !set {
			return nil, fmt.Errorf("%w: environment variable %s is not set", ErrSecretRef, name)
		}
		return []byte(v), nil
	}
	path := strings.TrimPrefix(ref, secretFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrSecretRef, path, errors.Unwrap(err))
	}
	return []byte(strings.TrimSpace(string(b))), nil
}
