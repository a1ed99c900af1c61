package authz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// purge removes dead letters. One is deleted by its sequence; a domain's,
// or those older than a duration, in one purge of the DLQ stream (by
// subject, up to the first one to keep). A batch record that was kept for
// its dead letter expires when the dead letter would have.
func (dq *deadLetters) purge(ctx context.Context, user string, req *api.PurgeRequest) (any, error) {
	named := 0
	for _, set := range []bool{req.Seq != 0, req.All, req.OlderThan != 0} {
		if set {
			named++
		}
	}
	switch {
	case named != 1:
		return nil, errf(api.CodeBadRequest, "authz: say which dead letters to purge, one of: {\"seq\": n}, {\"all\": true} or {\"older_than\": \"24h\"} (the last two with a \"domain\" or none)")
	case req.Seq != 0 && req.Domain != "":
		return nil, errf(api.CodeBadRequest, "authz: purge names a seq and a domain: a seq names one dead letter, whatever its domain")
	case req.OlderThan < 0:
		return nil, errf(api.CodeBadRequest, "authz: older_than %s: expected a positive duration such as \"24h\"", req.OlderThan)
	}
	filter := streams.DLQSubjects
	if req.Domain != "" {
		if err := pipeline.ValidateDomain(req.Domain); err != nil {
			return nil, errf(api.CodeBadRequest, "authz: purge: %v", err)
		}
		filter = streams.DLQSubject(req.Domain)
	}
	if req.Seq != 0 {
		if _, err := dq.dlq.GetMsg(ctx, req.Seq); errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, errf(api.CodeNotFound, "authz: no dead letter at sequence %d", req.Seq)
		} else if err != nil {
			return nil, fmt.Errorf("authz: read dead letter %d: %w", req.Seq, err)
		}
		if err := dq.dlq.DeleteMsg(ctx, req.Seq); errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, errf(api.CodeNotFound, "authz: no dead letter at sequence %d", req.Seq)
		} else if err != nil {
			return nil, fmt.Errorf("authz: delete dead letter %d: %w", req.Seq, err)
		}
		dq.log.Info("dead letter purged", "seq", req.Seq, "by", user)
		return &api.PurgeReply{Purged: 1}, nil
	}
	var keep uint64 // purge below this sequence; 0: all
	if req.OlderThan != 0 {
		var err error
		if keep, err = dq.firstSince(ctx, filter, dq.now().Add(-req.OlderThan.D())); err != nil {
			return nil, err
		}
	}
	n, err := dq.purgeDLQ(ctx, filter, keep)
	if err != nil {
		return nil, err
	}
	dq.log.Info("dead letters purged", "domain", req.Domain, "older_than", req.OlderThan.String(), "purged", n, "by", user)
	return &api.PurgeReply{Purged: n}, nil
}

// firstSince is the sequence of the first dead letter under filter stored
// at or after t (the stream's time; past the last one when none is), found
// by a binary search over the sequences: a purge of a long queue reads a
// few dozen messages, not all of them.
func (dq *deadLetters) firstSince(ctx context.Context, filter string, t time.Time) (uint64, error) {
	info, err := dq.dlq.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("authz: read the dead letters' stream: %w", err)
	}
	lo, hi := info.State.FirstSeq, info.State.LastSeq+1 // the answer is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		// The first message under filter at or after mid.
		rm, err := dq.dlq.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(filter))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			hi = mid // none at or after mid
		case err != nil:
			return 0, fmt.Errorf("authz: read dead letters: %w", err)
		case rm.Time.Before(t):
			lo = rm.Sequence + 1
		default:
			hi = mid
			if rm.Sequence < hi {
				hi = rm.Sequence
			}
		}
	}
	return lo, nil
}

// purgeDLQ purges the dead letters under filter below sequence keep (0:
// all of them) and says how many went. A stream purge, not a delete per
// message: one request, however many.
func (dq *deadLetters) purgeDLQ(ctx context.Context, filter string, keep uint64) (uint64, error) {
	body, _ := json.Marshal(struct {
		Filter string `json:"filter"`
		Seq    uint64 `json:"seq,omitempty"`
	}{filter, keep})
	m, err := dq.nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+streams.StreamDLQ, body)
	if err != nil {
		return 0, fmt.Errorf("authz: purge dead letters: %w", err)
	}
	var resp struct {
		Success bool   `json:"success"`
		Purged  uint64 `json:"purged"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return 0, fmt.Errorf("authz: purge dead letters: answer %q: %w", m.Data, err)
	}
	if resp.Error != nil || !resp.Success {
		desc := "refused"
		if resp.Error != nil {
			desc = resp.Error.Description
		}
		return 0, fmt.Errorf("authz: purge dead letters: %s", desc)
	}
	return resp.Purged, nil
}
