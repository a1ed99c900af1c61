package logging_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tickflow/tickflow/logging"
)

func TestCapped(t *testing.T) {
	long := strings.Repeat("a", 100)
	tests := []struct {
		name, in, want string
	}{
		{name: "empty", in: "", want: ""},
		{name: "short", in: "transfer", want: "transfer"},
		{name: "exactly the limit", in: long[:logging.CapBytes], want: long[:logging.CapBytes]},
		{name: "one byte over", in: long[:logging.CapBytes+1], want: long[:logging.CapBytes] + "… (65 bytes)"},
		{name: "long", in: long, want: long[:logging.CapBytes] + "… (100 bytes)"},
		// "é" is two bytes; the 64th byte is the middle of one, so the cut goes back a byte.
		{name: "never splits a character", in: "a" + strings.Repeat("é", 40), want: "a" + strings.Repeat("é", 31) + "… (81 bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := logging.Capped(tt.in)
			if got != tt.want {
				t.Fatalf("Capped(%d bytes) = %q, want %q", len(tt.in), got, tt.want)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("Capped made invalid UTF-8: %q", got)
			}
		})
	}
	if got := logging.Cap("abcdef", 3); got != "abc… (6 bytes)" {
		t.Fatalf("Cap(abcdef, 3) = %q", got)
	}
}
