package streams_test

import (
	"testing"

	"github.com/tickflow/tickflow/internal/streams"
)

func TestKeyQueueKey(t *testing.T) {
	for _, tc := range []struct{ name, key, want string }{
		{"plain", "acct-1_A", "pay.acct-1_A"},
		{"base58 address", "B62qkfzx7WQy", "pay.B62qkfzx7WQy"},
		{"outside the KV alphabet", "zk/app+1", "pay.=emsvYXBwKzE"},
		{"unicode", "ключ", "pay.=0LrQu9GO0Yc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := streams.KeyQueueKey("pay", tc.key); got != tc.want {
				t.Fatalf("KeyQueueKey(pay, %q) = %q, want %q", tc.key, got, tc.want)
			}
		})
	}
}
