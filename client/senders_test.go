package client_test

import (
	"errors"
	"testing"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
)

// TestSenders: the owner lists a domain's senders (none before a processor
// leased any); a caller may not, and a bad domain is refused before sending.
func TestSenders(t *testing.T) {
	b := setup(t)
	rep, err := b.owner.Senders(b.ctx, api.SendersRequest{Domain: domain})
	if err != nil || rep.Domain != domain || rep.Senders == nil || len(rep.Senders) != 0 {
		t.Fatalf("senders: %+v %v", rep, err)
	}
	if _, err := b.bob.Senders(b.ctx, api.SendersRequest{Domain: domain}); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("bob: %v, want ErrForbidden", err)
	}
	if _, err := b.owner.Senders(b.ctx, api.SendersRequest{Domain: "a.b"}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("bad domain: %v, want ErrInvalid", err)
	}
}
