package embedded

import "testing"

func TestParsePortRange(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int
		ok   bool
	}{
		{name: "linux default", in: "32768\t60999\n", want: 32768, ok: true},
		{name: "spaces", in: " 1024 65535 ", want: 1024, ok: true},
		{name: "one number", in: "32768", ok: false},
		{name: "not a number", in: "low high", ok: false},
		{name: "out of range", in: "0 10", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePortRange(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("parsePortRange(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}
