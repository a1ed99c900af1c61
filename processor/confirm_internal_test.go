package processor

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/streams"
)

func TestConfirmRetryDelay(t *testing.T) {
	conflict := fmt.Errorf("save: %w", streams.ErrConflict)
	other := errors.New("bucket unreachable")
	tests := []struct {
		name string
		n    int
		err  error
		want time.Duration
	}{
		{name: "a lost race retries at once", n: 1, err: conflict, want: conflictDelay},
		{name: "a race lost again and again backs off", n: 5, err: conflict, want: conflictDelay << 5},
		{name: "anything else backs off from the start", n: 1, err: other, want: conflictDelay << 1},
		{name: "the backoff is capped at a minute", n: 19, err: other, want: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := confirmRetryDelay(tt.n, tt.err); got != tt.want {
				t.Fatalf("confirmRetryDelay(%d, %v) = %s, want %s", tt.n, tt.err, got, tt.want)
			}
		})
	}
}
