package demo

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/examples/underwriting"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/x/steps"
	"github.com/tickflow/tickflow/x/steps/kvstore"
)

// ChainIncludeAfter is how soon the example chain includes a transaction.
const ChainIncludeAfter = 300 * time.Millisecond

// Mux registers the example handlers and the underwriting step
// pipeline, whose runs are kept in the runs bucket reached through nc.
// allowHTTP opens destinations http.post refuses by default
// (handlers.NewHTTP).
func Mux(ctx context.Context, nc *nats.Conn, log *slog.Logger, allowHTTP ...string) (*pipeline.ServeMux, error) {
	mux := pipeline.NewServeMux()
	h, err := handlers.NewHTTP(allowHTTP...)
	if err != nil {
		return nil, err
	}
	handlers.Register(mux, handlers.NewLedger(map[string]int64{"alice": 1000, "bob": 500}), h)
	mux.Register(handlers.TypeDispatch, handlers.NewChain(ChainIncludeAfter))
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	store, err := kvstore.New(ctx, js)
	if err != nil {
		return nil, err
	}
	_, err = underwriting.Register(mux, store, underwriting.Processors{
		ClearBusinessReport: &underwriting.ClearBusinessReport{Records: DemoRecords},
	}, steps.WithLogger(log))
	return mux, err
}
