package jsapi_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/testnats"
)

// TestDirectScan reads a stream's messages through batched direct gets
// against a real server: every message of the subjects the filter
// matches, from the start time on, in order, across several answers of a
// 256; none before the start; nothing at all where nothing matches;
// and a callback's error ends the scan with it.
func TestDirectScan(t *testing.T) {
	env := testnats.Start(t, []string{"payments"})
	ctx := testnats.Context(t, 30*time.Second)
	nc := env.Conn(t, "admin")
	js := env.JS(t, "admin")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SCAN", Subjects: []string{"scan.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			subject := "scan.a." + strconv.Itoa(i%3)
			if i%2 == 1 {
				subject = "scan.b"
			}
			m := nats.NewMsg(subject)
			m.Header.Set("N", strconv.Itoa(i))
			if _, err := js.PublishMsgAsync(m); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal("publishes not acknowledged")
		}
	}
	publish(0, 2600)
	st, err := js.Stream(ctx, "SCAN")
	if err != nil {
		t.Fatal(err)
	}
	// From the time message 100 was stored (the one before it is on
	// scan.b, which the filter leaves out, should it bear the same time).
	at, err := st.GetMsg(ctx, 101)
	if err != nil {
		t.Fatal(err)
	}
	start := at.Time

	var got []int
	err = jsapi.DirectScan(ctx, nc, "SCAN", "scan.a.*", start, func(m *nats.Msg) error {
		n, err := strconv.Atoi(m.Header.Get("N"))
		if err != nil {
			t.Fatalf("header N %q", m.Header.Get("N"))
		}
		got = append(got, n)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1250 {
		t.Fatalf("read %d messages, want the 1250 of scan.a.* stored since the start", len(got))
	}
	for i, n := range got {
		if want := 100 + 2*i; n != want {
			t.Fatalf("message %d is %d, want %d", i, n, want)
		}
	}

	none := 0
	if err := jsapi.DirectScan(ctx, nc, "SCAN", "scan.c", time.Time{}, func(*nats.Msg) error { none++; return nil }); err != nil || none != 0 {
		t.Fatalf("scan of a subject with no message: %d read, %v", none, err)
	}
	stop := errors.New("stop")
	read := 0
	err = jsapi.DirectScan(ctx, nc, "SCAN", "scan.>", time.Time{}, func(*nats.Msg) error {
		if read++; read == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || read != 3 {
		t.Fatalf("a callback's error: %d read, %v; want 3 and the error", read, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := jsapi.DirectScan(cctx, nc, "SCAN", "scan.>", time.Time{}, func(*nats.Msg) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("a scan with its context ended: %v", err)
	}
}
