package handlers_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/pipeline"
)

func TestHTTPClassifiesFailures(t *testing.T) {
	status := http.StatusOK
	var key string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key = r.Header.Get("Idempotency-Key")
		w.WriteHeader(status)
	}))
	defer srv.Close()
	h, err := handlers.NewHTTP(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	call := &pipeline.Call{BatchID: 7, Index: 2, Payload: pipeline.MustPayload(handlers.HTTPRequest{URL: srv.URL, Body: "x"})}
	tests := []struct {
		name      string
		status    int
		wantErr   bool
		permanent bool
		code      string
	}{
		{name: "ok", status: http.StatusOK},
		{name: "server error is retried", status: http.StatusBadGateway, wantErr: true, code: "http.5xx"},
		{name: "client error is permanent", status: http.StatusBadRequest, wantErr: true, permanent: true, code: "http.4xx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status = tt.status
			_, err := h.Handle(context.Background(), call)
			if (err != nil) != tt.wantErr || pipeline.IsPermanent(err) != tt.permanent {
				t.Fatalf("err %v (permanent %v)", err, pipeline.IsPermanent(err))
			}
			if tt.code != "" && (len(pipeline.Codes(err)) == 0 || pipeline.Codes(err)[0] != tt.code) {
				t.Fatalf("codes %v, want %s", pipeline.Codes(err), tt.code)
			}
			if key != "7/2" {
				t.Fatalf("Idempotency-Key %q, want 7/2", key)
			}
		})
	}
}

func TestLedgerCompensates(t *testing.T) {
	l := handlers.NewLedger(map[string]int64{"a": 10})
	call := &pipeline.Call{BatchID: 1, Submitter: "a", Payload: pipeline.MustPayload(handlers.Transfer{From: "a", To: "b", Amount: 4})}
	res, err := l.Handle(context.Background(), call)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Handle(context.Background(), call); err != nil || l.Balance("b") != 4 {
		t.Fatalf("a repeated call moved money again: b has %d (%v)", l.Balance("b"), err)
	}
	if err := l.Compensate(context.Background(), call, res); err != nil || l.Balance("a") != 10 || l.Balance("b") != 0 {
		t.Fatalf("after compensation a %d b %d (%v)", l.Balance("a"), l.Balance("b"), err)
	}
	over := &pipeline.Call{BatchID: 2, Submitter: "a", Payload: pipeline.MustPayload(handlers.Transfer{From: "a", To: "b", Amount: 11})}
	if _, err := l.Handle(context.Background(), over); !errors.Is(err, handlers.ErrInsufficientFunds) || !pipeline.IsPermanent(err) {
		t.Fatalf("overdraft: %v", err)
	}
}
