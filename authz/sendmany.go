package authz

import (
	"context"
	"fmt"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/logging"
)

// sendManyBody decodes a send_many request (decodeSendMany) and submits its
// batches.
func (s *Service) sendManyBody(ctx context.Context, user string, body []byte) (any, error) {
	var req api.SendManyRequest
	if err := decodeSendMany(body, &req); err != nil {
		return nil, err
	}
	rep, err := s.intake.sendMany(ctx, user, req.Batches)
	if err != nil {
		return nil, err
	}
	if ae := rep.firstInternal; ae != nil {
		s.log.Error("request failed", "op", api.OpSendMany, "user", user, "batch", rep.firstInternalAt,
			"err", logging.Cap(ae.Message, api.MaxErrorMessage))
	}
	return &rep.SendManyReply, nil
}

// sentMany is a send_many's reply, and the first failure inside authz
// that cut it short, if one did.
type sentMany struct {
	api.SendManyReply
	firstInternal   *Error
	firstInternalAt int
}

// sendMany submits each of reqs as send would, one after another in their
// order, so that batches of one key join its order as they are listed.
// The request is counted against the caller's send rate as len(reqs)
// sends, all or none, before any is submitted. A batch refused for what it
// asks (a 4xx) does not stop the others; a failure inside authz (a 5xx)
// stops the request there, since the next batch would most likely fail
// the same way, each after its own wait: the batches after it are
// answered 503, not submitted, and may be sent again.
func (ik *intake) sendMany(ctx context.Context, user string, reqs []api.SendRequest) (*sentMany, error) {
	n := len(reqs)
	if n == 0 {
		return nil, errf(api.CodeBadRequest, "authz: batches: none; expected 1 to %d batches to submit", api.MaxSendMany)
	}
	if n > api.MaxSendMany {
		return nil, errf(api.CodeBadRequest, "authz: batches: %d; one send_many submits at most %d batches", n, api.MaxSendMany)
	}
	t := ik.table()
	if err := ik.takeSends(t, user, n); err != nil {
		return nil, err
	}
	out := &sentMany{SendManyReply: api.SendManyReply{Results: make([]api.SendManyResult, n)}}
	for i := range reqs {
		if out.firstInternal != nil {
			out.Results[i] = api.SendManyResult{Code: api.CodeUnavailable, Error: logging.Cap(
				fmt.Sprintf("authz: not submitted: batch %d of this request failed inside authz; send this one again", out.firstInternalAt),
				api.MaxSendManyError)}
			continue
		}
		rep, err := ik.sendUnder(ctx, t, user, &reqs[i])
		if err == nil {
			out.Results[i] = api.Queued(rep)
			continue
		}
		ae := asError(err)
		out.Results[i] = api.SendManyResult{Code: ae.Code, Error: logging.Cap(ae.Message, api.MaxSendManyError)}
		if ae.Code >= api.CodeInternal {
			out.firstInternal, out.firstInternalAt = ae, i
		}
	}
	return out, nil
}
