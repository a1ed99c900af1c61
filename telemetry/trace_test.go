package telemetry_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestOneTracePerBatch: with an in-memory exporter, a batch of two
// functions is one trace from authz's send through both processor steps
// (the second reached through the requeued token), the worker's calls, to
// authz applying its callback; and no span carries a payload.
func TestOneTracePerBatch(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(testnats.Context(t, 5*time.Second)) })
	tel := telemetry.New(telemetry.Options{TracerProvider: tp})
	c := runSystem(t, tel)

	const secret = "payload-must-not-be-traced"
	id := send(t, c, "jobs", call(handlers.TypeNoop, map[string]string{"note": secret}), call(handlers.TypeNoop, nil))
	if s := finished(t, c, id); s != pipeline.Executed {
		t.Fatalf("batch %d: %s, want Executed", id, s)
	}

	var spans tracetest.SpanStubs
	var traceID trace.TraceID
	testnats.Eventually(t, 10*time.Second, "the batch's spans", func() bool {
		all := exp.GetSpans()
		for _, s := range all {
			if s.Name == "authz send" && has(s.Attributes, attribute.Int64("tickflow.batch_id", int64(id))) {
				traceID = s.SpanContext.TraceID()
			}
		}
		spans = spans[:0]
		for _, s := range all {
			if s.SpanContext.TraceID() == traceID {
				spans = append(spans, s)
			}
		}
		return count(spans, "authz send") == 1 && count(spans, "processor step") >= 2 &&
			count(spans, "worker call") >= 2 && count(spans, "authz apply") == 1
	})

	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.String(), secret) {
				t.Errorf("span %s carries the payload in %s", s.Name, a.Key)
			}
		}
	}
	// Every span but the root hangs off another span of the trace: the
	// context crossed each message, token, work request and callback.
	roots := 0
	for _, s := range spans {
		if !s.Parent.IsValid() {
			roots++
			if s.Name != "authz send" {
				t.Errorf("span %s is a root", s.Name)
			}
			continue
		}
		if _, ok := byID[s.Parent.SpanID()]; !ok {
			t.Errorf("span %s's parent is not in the trace", s.Name)
		}
	}
	if roots != 1 {
		t.Errorf("%d roots, want 1", roots)
	}
	for _, s := range spans {
		if s.Name == "worker call" && byID[s.Parent.SpanID()].Name != "processor step" {
			t.Errorf("a worker call's parent is %q, want a processor step", byID[s.Parent.SpanID()].Name)
		}
		if s.Name == "processor step" && !has(s.Attributes, attribute.String("tickflow.domain", "payments")) {
			t.Errorf("a step without its domain: %v", s.Attributes)
		}
	}
	if t.Failed() {
		t.Log(describe(spans))
	}
}

func has(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	return slices.Contains(attrs, want)
}

func count(spans tracetest.SpanStubs, name string) int {
	n := 0
	for _, s := range spans {
		if s.Name == name {
			n++
		}
	}
	return n
}

func describe(spans tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "%s %s parent %s %v\n", s.Name, s.SpanContext.SpanID(), s.Parent.SpanID(), s.Attributes)
	}
	return b.String()
}

// TestCallerTraceIsLinkedNotContinued: a caller's traceparent and
// tracestate on a send are the caller's input: the batch's trace starts at
// authz's span, which links to the caller's span, and the caller's
// tracestate travels in none of the batch's messages.
func TestCallerTraceIsLinkedNotContinued(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(testnats.Context(t, 5*time.Second)) })
	tel := telemetry.New(telemetry.Options{TracerProvider: tp})
	c, env := runSystemEnv(t, tel)
	send(t, c, "jobs", call(handlers.TypeNoop, nil)) // authz is up

	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	m := nats.NewMsg(streams.AuthzSubject("alice", api.OpSend))
	m.Header.Set("traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-00") // not sampled
	m.Header.Set("tracestate", "caller=injected")
	m.Data = []byte(`{"label":"jobs","functions":[{"type":"noop"}]}`)
	resp, err := env.Conn(t, "alice").RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep api.SendReply
	if err := json.Unmarshal(resp.Data, &rep); err != nil || rep.ID == 0 {
		t.Fatalf("send: %s %v", resp.Data, err)
	}
	if s := finished(t, c, rep.ID); s != pipeline.Executed {
		t.Fatalf("batch %d: %s", rep.ID, s)
	}
	var root tracetest.SpanStub
	testnats.Eventually(t, 10*time.Second, "the batch's spans", func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == "authz send" && has(s.Attributes, attribute.Int64("tickflow.batch_id", int64(rep.ID))) {
				root = s
			}
		}
		return root.Name != "" && count(sameTrace(exp.GetSpans(), root.SpanContext.TraceID()), "authz apply") == 1
	})
	if root.SpanContext.TraceID().String() == callerTrace || root.Parent.IsValid() {
		t.Fatalf("authz send continued the caller's trace: trace %s parent %v", root.SpanContext.TraceID(), root.Parent)
	}
	if len(root.Links) != 1 || root.Links[0].SpanContext.TraceID().String() != callerTrace || root.Links[0].SpanContext.TraceState().Len() != 0 {
		t.Fatalf("links %+v: want one link to the caller's trace, without its tracestate", root.Links)
	}
	for _, s := range sameTrace(exp.GetSpans(), root.SpanContext.TraceID()) {
		if s.SpanContext.TraceState().Len() != 0 {
			t.Fatalf("span %s carries tracestate %q", s.Name, s.SpanContext.TraceState().String())
		}
	}
}

// sameTrace keeps the spans of trace id.
func sameTrace(spans tracetest.SpanStubs, id trace.TraceID) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

// TestAtomicBatchesTravellingTogetherKeepTheirTraces: atomic units that
// go to a worker in one request (several at once) each keep their batch's
// trace: every batch's trace holds its worker call (more than one when a
// call was answered busy and sent again) and its callback's apply.
func TestAtomicBatchesTravellingTogetherKeepTheirTraces(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(testnats.Context(t, 5*time.Second)) })
	tel := telemetry.New(telemetry.Options{TracerProvider: tp})
	c, env := runSystemEnv(t, tel)
	send(t, c, "jobs", call(handlers.TypeNoop, nil)) // authz is up
	owner, err := client.New(env.Conn(t, "owner"), "owner", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testnats.Context(t, 20*time.Second)
	// Paused while they queue, so that the next tick takes them together
	// and their units share requests.
	if _, err := owner.Pause(ctx, api.DomainRequest{Domain: "payments"}); err != nil {
		t.Fatal(err)
	}
	const n = 24
	ids := make([]uint64, n)
	for i := range n {
		ids[i] = send(t, c, "transfer", call(handlers.TypeTransfer, handlers.Transfer{From: "alice", To: "bob", Amount: 1}))
	}
	if _, err := owner.Resume(ctx, api.DomainRequest{Domain: "payments"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if s := finished(t, c, id); s != pipeline.Executed {
			t.Fatalf("batch %d: %s", id, s)
		}
	}
	testnats.Eventually(t, 20*time.Second, "every batch's trace with its worker call", func() bool {
		all := exp.GetSpans()
		for _, id := range ids {
			var tid trace.TraceID
			for _, s := range all {
				if s.Name == "authz send" && has(s.Attributes, attribute.Int64("tickflow.batch_id", int64(id))) {
					tid = s.SpanContext.TraceID()
				}
			}
			if !tid.IsValid() || count(sameTrace(all, tid), "worker call") < 1 || count(sameTrace(all, tid), "authz apply") < 1 {
				return false
			}
		}
		return true
	})
	for _, s := range exp.GetSpans() {
		if s.Name == "worker call" && !s.Parent.IsValid() {
			t.Errorf("a worker call is a root: %v", s.Attributes)
		}
	}
}
