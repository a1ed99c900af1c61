package dashboard

import (
	"net/http"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/pipeline"
)

// Every read and action goes through the session's own client, as the
// logged-in user: authz's answers, refusals included, are passed on.

func (s *Server) getDomains(r *http.Request, ss *session) (any, error) {
	return ss.c.Domains(r.Context())
}

func (s *Server) getPresence(r *http.Request, ss *session) (any, error) {
	return ss.c.Presence(r.Context())
}

func (s *Server) getInFlight(r *http.Request, ss *session) (any, error) {
	limit, err := queryInt(r, "limit")
	if err != nil {
		return nil, err
	}
	return ss.c.InFlight(r.Context(), api.InFlightRequest{Domain: r.URL.Query().Get("domain"), Limit: limit})
}

func (s *Server) getBatch(r *http.Request, ss *session) (any, error) {
	id, err := queryUint(r, "id")
	if err != nil {
		return nil, err
	}
	return ss.c.Batch(r.Context(), api.IDRequest{ID: id})
}

func (s *Server) getDLQ(r *http.Request, ss *session) (any, error) {
	from, err := queryUint(r, "from")
	if err != nil {
		return nil, err
	}
	limit, err := queryInt(r, "limit")
	if err != nil {
		return nil, err
	}
	return ss.c.DLQ(r.Context(), api.DLQRequest{Domain: r.URL.Query().Get("domain"), From: from, Limit: limit})
}

func (s *Server) getList(r *http.Request, ss *session) (any, error) {
	before, err := queryUint(r, "before")
	if err != nil {
		return nil, err
	}
	limit, err := queryInt(r, "limit")
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	return ss.c.List(r.Context(), api.ListRequest{Status: pipeline.Status(q.Get("status")), Before: before,
		Limit: limit, Submitter: q.Get("submitter")})
}

func (s *Server) pause(r *http.Request, ss *session, body []byte) (any, error) {
	var req api.DomainRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return ss.c.Pause(r.Context(), req)
}

func (s *Server) resume(r *http.Request, ss *session, body []byte) (any, error) {
	var req api.DomainRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return ss.c.Resume(r.Context(), req)
}

func (s *Server) replay(r *http.Request, ss *session, body []byte) (any, error) {
	var req struct {
		Seq uint64 `json:"seq"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return ss.c.Replay(r.Context(), api.ReplayRequest{Seq: req.Seq})
}

// purge removes dead letters, as the owner's purge does: one by its seq,
// every one (of a domain, or of all) with all, or those older than
// older_than (a duration such as "24h"). authz refuses anyone but the owner.
func (s *Server) purge(r *http.Request, ss *session, body []byte) (any, error) {
	var req api.PurgeRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return ss.c.Purge(r.Context(), req)
}

func (s *Server) cancel(r *http.Request, ss *session, body []byte) (any, error) {
	var req api.IDRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return ss.c.Cancel(r.Context(), req)
}
