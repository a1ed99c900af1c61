package streams_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

func TestIsInbox(t *testing.T) {
	tests := []struct {
		name    string
		subject string
		want    bool
	}{
		{"default inbox", "_INBOX.abc.1", true},
		{"role inbox", "_INBOX_alice.abc", true},
		{"role inbox, deep", "_INBOX_processor.x.y.z", true},
		{"empty", "", false},
		{"prefix alone", "_INBOX", false},
		{"role prefix alone", "_INBOX_alice", false},
		{"trailing dot", "_INBOX_alice.", false},
		{"empty token", "_INBOX_alice..x", false},
		{"no role name", "_INBOX_.x", false},
		{"wildcard", "_INBOX_alice.*", false},
		{"full wildcard", "_INBOX.>", false},
		{"space", "_INBOX.a b", false},
		{"a stream subject", "batches.high.payments", false},
		{"a bucket subject", "$KV.batches.9", false},
		{"an API subject", "$JS.API.STREAM.MSG.DELETE.HIGH", false},
		{"an acknowledgement", "$JS.ACK.HIGH.proc-payments.1.1.1.1.1", false},
		{"look-alike", "_INBOXES.a", false},
		{"inbox in the middle", "x._INBOX.a", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := streams.IsInbox(tt.subject); got != tt.want {
				t.Errorf("IsInbox(%q) = %v, want %v", tt.subject, got, tt.want)
			}
			err := streams.CheckReply(tt.subject)
			if wantOK := tt.want || tt.subject == ""; (err == nil) != wantOK {
				t.Errorf("CheckReply(%q) = %v", tt.subject, err)
			}
			if err != nil && !errors.Is(err, streams.ErrReplyRefused) {
				t.Errorf("CheckReply(%q) = %v, want ErrReplyRefused", tt.subject, err)
			}
		})
	}
	if !streams.IsInboxOf("_INBOX_alice.x", "alice") || streams.IsInboxOf("_INBOX_alice.x", "bob") ||
		streams.IsInboxOf("_INBOX_alicex.y", "alice") || streams.IsInboxOf("_INBOX.x", "alice") {
		t.Error("IsInboxOf does not hold a reply to its user's own inbox")
	}
}

// TestNoStreamCapturesInboxes: services answer only into inboxes, which is
// safe only while no stream stores what is published there.
func TestNoStreamCapturesInboxes(t *testing.T) {
	for _, cfg := range streams.Streams(streams.DefaultSettings()) {
		for _, subj := range cfg.Subjects {
			if strings.HasPrefix(subj, "_INBOX") || strings.HasPrefix(subj, ">") || strings.HasPrefix(subj, "*") {
				t.Errorf("stream %s captures %q, which covers inbox subjects", cfg.Name, subj)
			}
		}
	}
}

// TestReplyPublishesOnlyIntoInboxes: Reply refuses a reply subject that is
// not an inbox, and the stream it names stays as it was.
func TestReplyPublishesOnlyIntoInboxes(t *testing.T) {
	env := testnats.Start(t, []string{"payments"})
	nc := env.Conn(t, "admin")
	js := env.JS(t, "admin")
	ctx := testnats.Context(t, 10*time.Second)
	target := streams.TokenSubject("high", "payments")
	before, err := js.Stream(ctx, streams.StreamHigh)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Reply(nc, target, []byte("x"), "", ""); !errors.Is(err, streams.ErrReplyRefused) {
		t.Fatalf("Reply to %s = %v, want ErrReplyRefused", target, err)
	}
	sub, err := nc.SubscribeSync("_INBOX.test.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Reply(nc, "_INBOX.test.1", []byte("ok"), "409", "conflict"); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "ok" || m.Header.Get("Nats-Service-Error-Code") != "409" {
		t.Fatalf("got %q %v", m.Data, m.Header)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	after, err := js.Stream(ctx, streams.StreamHigh)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := after.CachedInfo().State.LastSeq, before.CachedInfo().State.LastSeq; a != b {
		t.Fatalf("HIGH moved from %d to %d", b, a)
	}
}
