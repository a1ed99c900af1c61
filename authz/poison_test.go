package authz_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/vmihailenco/msgpack/v5"
)

// startAuthzWith stops the bundle's authz and runs one with opts instead
// (owner and table as the bundle's), logging at debug into the returned buffer.
func (b *bundle) startAuthzWith(t *testing.T, opts authz.Options) *testnats.LogBuffer {
	t.Helper()
	b.stop()
	sink := &testnats.LogBuffer{}
	opts.Logger = slogJSON(sink)
	b.runAuthz(t, opts)
	return sink
}

// naks records the delay each NAK of a callback asks the server for, as
// authz sends it on the message's ack subject.
type naks struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (n *naks) all() []time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]time.Duration(nil), n.delays...)
}

// deadLettered waits until one callback is dead-lettered, failing t if
// the callbacks were put back more than tries times (retried without
// bound), and returns the dead letters listed.
func (n *naks) deadLettered(t *testing.T, b *bundle, tries int) api.DLQReply {
	t.Helper()
	var dlq api.DLQReply
	testnats.Eventually(t, 10*time.Second, "a callback dead-lettered", func() bool {
		if got := len(n.all()); got > tries {
			t.Fatalf("%d NAKs, want at most %d: the callback is retried without bound", got, tries)
		}
		if e := b.call(t, "owner", api.OpDLQ, api.DLQRequest{}, &dlq); e != nil {
			t.Fatalf("dlq: %+v", e)
		}
		return len(dlq.Items) == 1
	})
	return dlq
}

func watchNaks(t *testing.T, b *bundle) *naks {
	t.Helper()
	n := &naks{}
	nc := b.env.Conn(t, "admin")
	sub, err := nc.Subscribe("$JS.ACK."+streams.StreamCallbacks+"."+streams.CallbacksConsumer+".>", func(m *nats.Msg) {
		body, ok := bytes.CutPrefix(m.Data, []byte("-NAK"))
		if !ok {
			return
		}
		var d struct {
			Delay time.Duration `json:"delay"`
		}
		if len(bytes.TrimSpace(body)) > 0 {
			if err := json.Unmarshal(bytes.TrimSpace(body), &d); err != nil {
				t.Errorf("NAK body %q: %v", m.Data, err)
			}
		}
		n.mu.Lock()
		n.delays = append(n.delays, d.Delay)
		n.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPoisonedCallbackIsDeadLettered: a callback that cannot be applied
// because its batch record (or the callback itself) is garbage or of a newer
// wire version is retried a bounded number of times with growing delays,
// logged once, then dead-lettered and acknowledged; once the record is
// readable again, replaying the dead letter applies the callback.
func TestPoisonedCallbackIsDeadLettered(t *testing.T) {
	future := func(id uint64) []byte {
		data, err := msgpack.Marshal(&records.BatchRecord{V: records.WireVersion + 1, Batch: pipeline.Batch{ID: id, Domain: domain}, Status: pipeline.InProcess})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	callback := func(id uint64) *nats.Msg {
		m, err := streams.CallbackMsg(&records.Callback{BatchID: id, Domain: domain, Priority: pipeline.Med,
			Outcome: pipeline.ExecutedOutcome(1), Attempts: 1, At: time.Now(), Processor: "p1",
			Outputs: []pipeline.Output{{Index: 0, Type: "noop", Data: pipeline.MustPayload("kept")}}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name     string
		record   func(id uint64) []byte // what the batch record is overwritten with; nil keeps it
		callback func(id uint64) *nats.Msg
		version  float64 // the version the log line must name; 0: none
		replays  bool    // replay applies it once the record is restored
	}{
		{name: "garbage record", record: func(uint64) []byte { return []byte("\xc1 not msgpack") }, callback: callback, replays: true},
		{name: "record of a newer version", record: future, callback: callback, version: records.WireVersion + 1, replays: true},
		{name: "garbage callback", callback: func(id uint64) *nats.Msg {
			m := callback(id)
			m.Data = []byte("\xc1 not msgpack")
			return m
		}},
		{name: "callback of a newer version", callback: func(id uint64) *nats.Msg {
			m := callback(id)
			m.Data, _ = msgpack.Marshal(&records.Callback{V: records.WireVersion + 1, BatchID: id, Domain: domain, Outcome: pipeline.ExecutedOutcome(1)})
			return m
		}, version: records.WireVersion + 1},
	}
	backoff := []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := setup(t)
			id := b.send(t, "alice", "jobs", noop())
			sink := b.startAuthzWith(t, authz.Options{CallbackBackoff: backoff})
			admin := b.env.JS(t, "admin")
			kv, err := admin.KeyValue(b.ctx, streams.BucketBatches)
			if err != nil {
				t.Fatal(err)
			}
			orig, err := kv.Get(b.ctx, streams.BatchKey(id))
			if err != nil {
				t.Fatal(err)
			}
			if tt.record != nil {
				if _, err := kv.Put(b.ctx, streams.BatchKey(id), tt.record(id)); err != nil {
					t.Fatal(err)
				}
			}
			n := watchNaks(t, b)
			if _, err := admin.PublishMsg(b.ctx, tt.callback(id)); err != nil {
				t.Fatal(err)
			}

			dlq := n.deadLettered(t, b, len(backoff))
			it := dlq.Items[0]
			if it.BatchID != id || it.Domain != domain || !strings.Contains(it.Error, "callback not applied after 4 deliveries") {
				t.Fatalf("dead letter %+v", it)
			}

			// Bounded, with growing delays: one NAK per backoff step, each
			// asking for its step's delay (the server keeps to it).
			delays := n.all()
			if len(delays) != len(backoff) {
				t.Fatalf("%d NAKs, want %d", len(delays), len(backoff))
			}
			for i, d := range delays {
				if d != backoff[i] {
					t.Fatalf("NAK %d asked for a delay of %s, want %s", i+1, d, backoff[i])
				}
			}
			c, err := admin.Consumer(b.ctx, streams.StreamCallbacks, streams.CallbacksConsumer)
			if err != nil {
				t.Fatal(err)
			}
			testnats.Eventually(t, 5*time.Second, "callback acknowledged", func() bool {
				info, err := c.Info(b.ctx)
				if err != nil {
					t.Fatal(err)
				}
				if info.Delivered.Consumer > uint64(len(backoff)+1) {
					t.Fatalf("%d deliveries, want %d", info.Delivered.Consumer, len(backoff)+1)
				}
				return info.NumAckPending == 0 && info.NumPending == 0
			})
			// Acknowledged, the callback left CALLBACKS: its dead letter
			// keeps its bytes for the replay below.
			testnats.Eventually(t, 5*time.Second, "callback removed", func() bool {
				s, err := admin.Stream(b.ctx, streams.StreamCallbacks)
				if err != nil {
					t.Fatal(err)
				}
				return s.CachedInfo().State.Msgs == 0
			})

			// One line at warn or above, naming the version when known.
			var loud []map[string]any
			for _, r := range sink.Records(t) {
				if r["level"] == "WARN" || r["level"] == "ERROR" {
					loud = append(loud, r)
				}
			}
			if len(loud) != 1 || !strings.Contains(loud[0]["msg"].(string), "dead-lettered") || loud[0]["batch_id"] != float64(id) {
				t.Fatalf("want one line at warn or above about the dead letter, got %v", loud)
			}
			if v, _ := loud[0]["version"].(float64); v != tt.version {
				t.Fatalf("log line names version %v, want %v: %v", loud[0]["version"], tt.version, loud[0])
			}

			var rep api.ReplayReply
			e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Seq: it.Seq}, &rep)
			if !tt.replays {
				if e == nil || e.Code != "409" {
					t.Fatalf("replaying a callback still unreadable: %+v %+v", e, rep)
				}
				return
			}
			if e == nil {
				t.Fatalf("replay applied a callback to an unreadable record: %+v", rep)
			}
			// Roll forward (here: the record is readable again), then replay.
			if _, err := kv.Put(b.ctx, streams.BatchKey(id), orig.Value()); err != nil {
				t.Fatal(err)
			}
			if e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Seq: it.Seq}, &rep); e != nil || len(rep.Replayed) != 1 || rep.Replayed[0].AsNew != id {
				t.Fatalf("replay: %+v %+v", e, rep)
			}
			if rec := b.record(t, id); rec.Status != pipeline.Executed || rec.Attempts != 1 ||
				len(rec.Outputs) != 1 || string(rec.Outputs[0].Data) != string(pipeline.MustPayload("kept")) {
				t.Fatalf("record after replay, want the callback's outputs: %+v", rec)
			}
		})
	}
}
