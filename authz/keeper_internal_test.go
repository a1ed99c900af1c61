package authz

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// keeperBed is a provisioned server whose HIGH queue of domain pay the
// test fills and drains one token at a time, as a processor that keeps up
// does.
type keeperBed struct {
	*parts
	k     *keeper
	queue jetstream.Stream
	c     jetstream.Consumer
	n     int
}

func newKeeperBed(t *testing.T) *keeperBed {
	t.Helper()
	p := newParts(t)
	b := &keeperBed{parts: p, k: newKeeper(p.js, p.h.queues, p.log), queue: p.h.queues[pipeline.High]}
	var err error
	if b.c, err = p.admin.Consumer(p.ctx, streams.StreamHigh, streams.ProcessorConsumer("pay")); err != nil {
		t.Fatal(err)
	}
	return b
}

// round publishes a token of pay and takes and acknowledges it, waiting
// for the acknowledgement's answer: the token is gone when it returns.
func (b *keeperBed) round(t *testing.T) {
	t.Helper()
	b.n++
	data := []byte("token " + strconv.Itoa(b.n))
	if _, err := b.js.Publish(b.ctx, streams.TokenSubject(pipeline.High, "pay"), data); err != nil {
		t.Fatal(err)
	}
	batch, err := b.c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		if string(m.Data()) != string(data) {
			t.Fatalf("the consumer delivered %q on %s, want the token %q", m.Data(), m.Subject(), data)
		}
		if err := m.DoubleAck(b.ctx); err != nil {
			t.Fatal(err)
		}
		got++
	}
	if got != 1 {
		t.Fatalf("round %d: %d tokens delivered, want 1 (%v)", b.n, got, batch.Error())
	}
}

// keepers counts the keepers in HIGH.
func (b *keeperBed) keepers(t *testing.T) uint64 {
	t.Helper()
	info, err := b.queue.Info(b.ctx, jetstream.WithSubjectFilter(streams.KeeperSubject(pipeline.High)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[streams.KeeperSubject(pipeline.High)]
}

// TestKeeperKeepsTheQueueFile: a queue drained one token at a time makes
// the file store replace its block file after nearly every token; with a
// keeper placed, it writes on in the same file. No consumer is given the
// keeper, and the domain's counts leave it out.
func TestKeeperKeepsTheQueueFile(t *testing.T) {
	const rounds = 20
	b := newKeeperBed(t)
	b.round(t)
	first := b.env.LastBlock(t, streams.StreamHigh)
	for range rounds {
		b.round(t)
	}
	if grew := b.env.LastBlock(t, streams.StreamHigh) - first; grew < rounds/2 {
		t.Fatalf("without a keeper the block file changed %d times in %d rounds: the file store no longer replaces an emptied block, and the keeper may have lost its reason", grew, rounds)
	}

	if err := b.k.keep(b.ctx, pipeline.High, b.queue); err != nil {
		t.Fatal(err)
	}
	first = b.env.LastBlock(t, streams.StreamHigh)
	for range rounds {
		b.round(t)
	}
	if grew := b.env.LastBlock(t, streams.StreamHigh) - first; grew != 0 {
		t.Fatalf("with a keeper the block file changed %d times in %d rounds, want 0", grew, rounds)
	}
	if n := b.keepers(t); n != 1 {
		t.Fatalf("%d keepers in HIGH, want 1", n)
	}
	info, err := b.c.Info(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		t.Fatalf("the domain's consumer has %d pending and %d unacknowledged, want none: the keeper is not a token", info.NumPending, info.NumAckPending)
	}
	counts, err := subjectCounts(b.ctx, b.queue, streams.QueueFilter(pipeline.High, "pay"))
	if err != nil || len(counts) != 0 {
		t.Fatalf("the domain's queue counts %v (%v), want none", counts, err)
	}
	if n := len(testnats.Messages(t, b.admin, streams.StreamHigh)); n != 0 {
		t.Fatalf("%d tokens read from HIGH, want none", n)
	}
}

// TestKeeperReplaces: a keeper is replaced once span messages came after
// it, or once it is refresh old and a message came, and not while nothing
// comes; the one it replaced goes at its time to live. A stream whose
// sequence went back (made again) gets a new keeper at the next look.
func TestKeeperReplaces(t *testing.T) {
	b := newKeeperBed(t)
	k := b.k
	k.span, k.refresh, k.ttl = 4, time.Hour, time.Second
	look := func() uint64 {
		t.Helper()
		if err := k.keep(b.ctx, pipeline.High, b.queue); err != nil {
			t.Fatal(err)
		}
		return k.placed[pipeline.High].seq
	}
	s1 := look()
	if s1 == 0 || b.keepers(t) != 1 {
		t.Fatalf("first look: keeper at %d, %d in the stream", s1, b.keepers(t))
	}
	for range 3 {
		b.round(t)
	}
	if s := look(); s != s1 {
		t.Fatalf("3 messages after the keeper: replaced (%d → %d), want kept", s1, s)
	}
	b.round(t)
	s2 := look()
	if s2 <= s1 {
		t.Fatalf("4 messages after the keeper: at %d, want a new one after %d", s2, s1)
	}
	if s := look(); s != s2 {
		t.Fatalf("nothing came: replaced (%d → %d), want kept", s2, s)
	}
	testnats.Eventually(t, 10*time.Second, "the replaced keeper gone at its time to live", func() bool { return b.keepers(t) <= 1 })

	k.refresh = 0
	b.round(t)
	s3 := look()
	if s3 <= s2 {
		t.Fatalf("a message after a keeper refresh old: at %d, want a new one after %d", s3, s2)
	}

	k.placed[pipeline.High] = placedKeeper{seq: s3 + 1000, at: time.Now()}
	if s := look(); s != 0 {
		t.Fatalf("a stream behind the keeper placed: still at %d, want it forgotten", s)
	}
	if s := look(); s <= s3 {
		t.Fatalf("the look after: at %d, want a new keeper after %d", s, s3)
	}
}

// TestKeeperWithoutItsSubject: on a queue stream provisioned before the
// keeper (without its subject) the keeper's publish fails; the third
// failure in a row is logged, once, as a warning, and once the stream
// takes the subject again a keeper is placed and that is logged.
func TestKeeperWithoutItsSubject(t *testing.T) {
	b := newKeeperBed(t)
	logs := &testnats.LogBuffer{}
	b.k.log = slog.New(slog.NewJSONHandler(logs, nil))
	b.k.every, b.k.maxWait = 5*time.Millisecond, 20*time.Millisecond
	subjects := func(keep bool) {
		t.Helper()
		info, err := b.queue.Info(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		cfg := info.Config
		cfg.Subjects = slices.DeleteFunc(cfg.Subjects, streams.IsKeeper)
		if keep {
			cfg.Subjects = append(cfg.Subjects, streams.KeeperSubject(pipeline.High))
		}
		if _, err := b.admin.UpdateStream(b.ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	subjects(false)
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- b.k.run(ctx) }()
	const warning, placed = "queue keepers not placed", "queue keepers placed again"
	testnats.Eventually(t, 10*time.Second, "the warning", func() bool { return strings.Contains(logs.String(), warning) })
	subjects(true)
	testnats.Eventually(t, 10*time.Second, "a keeper placed", func() bool { return strings.Contains(logs.String(), placed) })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := strings.Count(logs.String(), warning); n != 1 {
		t.Fatalf("the warning logged %d times, want once:\n%s", n, logs)
	}
	if b.keepers(t) == 0 {
		t.Fatal("no keeper in HIGH")
	}
}
