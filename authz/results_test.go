package authz_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

func flaky() api.CallSpec {
	return api.CallSpec{Type: handlers.TypeFlaky, Payload: pipeline.MustPayload(handlers.FlakyArgs{})}
}

// TestBatchOutputs: every function's output is in the batch reply and the
// record once the batch finished, a batch that finished at its first step
// (one function, or an atomic unit) included, which keeps no progress.
func TestBatchOutputs(t *testing.T) {
	b := setup(t)
	transfer := api.CallSpec{Type: handlers.TypeTransfer, Payload: pipeline.MustPayload(handlers.Transfer{From: "alice", To: "bob", Amount: 10})}
	for _, tc := range []struct {
		name  string
		label string
		calls []api.CallSpec
		// want is each output's type and decoded data (an int).
		want []pipeline.Output
		data []int64
	}{
		{name: "one function", label: "jobs", calls: []api.CallSpec{flaky()},
			want: []pipeline.Output{{Index: 0, Type: handlers.TypeFlaky}}, data: []int64{1}},
		{name: "two functions", label: "jobs", calls: []api.CallSpec{flaky(), flaky()},
			want: []pipeline.Output{{Index: 0, Type: handlers.TypeFlaky}, {Index: 1, Type: handlers.TypeFlaky}}, data: []int64{1, 1}},
		{name: "atomic", label: "transfer", calls: []api.CallSpec{transfer, noop()},
			want: []pipeline.Output{{Index: 0, Type: handlers.TypeTransfer}, {Index: 1, Type: handlers.TypeNoop}}, data: []int64{90, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := b.send(t, "alice", tc.label, tc.calls...)
			if rec := b.settled(t, id); rec.Status != pipeline.Executed {
				t.Fatalf("outcome %s (%+v)", rec.Status, rec.History)
			}
			rep := answered(t, "batch", func() (*api.BatchReply, error) {
				return b.client(t, "alice").Batch(b.ctx, api.IDRequest{ID: id})
			})
			if !rep.Terminal() {
				t.Fatalf("reply not terminal: %+v", rep.Record)
			}
			for what, outs := range map[string][]pipeline.Output{"reply": rep.Outputs, "record": rep.Record.Outputs} {
				if len(outs) != len(tc.want) {
					t.Fatalf("%s outputs %+v, want %d", what, outs, len(tc.want))
				}
				for i, o := range outs {
					var got int64
					if len(o.Data) > 0 {
						if err := o.Data.Decode(&got); err != nil {
							t.Fatalf("%s output %d: %v", what, i, err)
						}
					}
					if o.Index != tc.want[i].Index || o.Type != tc.want[i].Type || got != tc.data[i] {
						t.Errorf("%s output %d = %+v (data %d), want %+v (data %d)", what, i, o, got, tc.want[i], tc.data[i])
					}
				}
			}
		})
	}
}

// TestOutcomeAnnounced: authz announces a finished batch on its
// submitter's outcome subject, once the record holds the outcome.
func TestOutcomeAnnounced(t *testing.T) {
	b := setup(t)
	msgs := make(chan *nats.Msg, 4)
	sub, err := b.conn(t, "alice").ChanSubscribe(streams.OutcomeFilter("alice"), msgs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.conn(t, "alice").Flush(); err != nil {
		t.Fatal(err)
	}
	id := b.send(t, "alice", "jobs", flaky())
	b.settled(t, id)
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	select {
	case m := <-msgs:
		if m.Subject != streams.OutcomeSubject("alice", id) || string(m.Data) != "Executed" {
			t.Fatalf("announced %q on %s, want Executed on %s", m.Data, m.Subject, streams.OutcomeSubject("alice", id))
		}
	case <-ctx.Done():
		t.Fatal("no outcome announced")
	}
}
