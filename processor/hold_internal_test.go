package processor

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	mid := func() float64 { return 0.5 } // no jitter
	tests := []struct {
		name string
		try  int
		rnd  func() float64
		want time.Duration
	}{
		{name: "first try: the base", try: 1, rnd: mid, want: 250 * time.Millisecond},
		{name: "doubled per try", try: 3, rnd: mid, want: time.Second},
		{name: "capped", try: 40, rnd: mid, want: 10 * time.Second},
		{name: "jitter down 20%", try: 1, rnd: func() float64 { return 0 }, want: 200 * time.Millisecond},
		{name: "jitter up to 20%", try: 2, rnd: func() float64 { return 1 }, want: 600 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := backoff(tt.try, 250*time.Millisecond, 10*time.Second, tt.rnd); got != tt.want {
				t.Fatalf("backoff(%d) = %s, want %s", tt.try, got, tt.want)
			}
		})
	}
}

func TestHoldsCount(t *testing.T) {
	var h holds
	t0 := time.Unix(1000, 0)
	id := tokenID{stream: "S", seq: 1}
	if e := h.note(id, "busy", t0); e.tries != 1 || !e.since.Equal(t0) {
		t.Fatalf("first note = %+v, want 1 try since t0", e)
	}
	if e := h.note(id, "busy", t0.Add(time.Second)); e.tries != 2 || !e.since.Equal(t0) {
		t.Fatalf("second note = %+v, want 2 tries since t0", e)
	}
	// Another reason starts a new count.
	if e := h.note(id, "poison", t0.Add(2*time.Second)); e.tries != 1 || !e.since.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("note for a new reason = %+v, want 1 try since t0+2s", e)
	}
	// Another token has its own count.
	if e := h.note(tokenID{stream: "S", seq: 2}, "poison", t0); e.tries != 1 {
		t.Fatalf("note of another token = %+v, want 1 try", e)
	}
	for i := range uint64(maxHolds + 10) {
		h.note(tokenID{stream: "T", seq: i}, "busy", t0)
	}
	if n := len(h.m); n > maxHolds {
		t.Fatalf("holds remembers %d tokens, more than its bound %d", n, maxHolds)
	}
}
