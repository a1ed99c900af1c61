package processor

import "testing"

func TestSenderPoolShare(t *testing.T) {
	tests := []struct {
		name  string
		names []string
		limit int
		want  int
	}{
		{name: "no pool", want: 0},
		{name: "pool of one: no bound", names: []string{"a"}, want: 0},
		{name: "all but one by default", names: []string{"a", "b", "c"}, want: 2},
		{name: "the option wins", names: []string{"a", "b", "c"}, limit: 1, want: 1},
		{name: "the option even above the pool", names: []string{"a"}, limit: 3, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := &senderPool{names: tt.names, limit: tt.limit}
			if got := sp.share(); got != tt.want {
				t.Fatalf("share() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestLeasesRemembered(t *testing.T) {
	var l leases
	if _, ok := l.get(1); ok {
		t.Fatal("an empty lease table knows batch 1")
	}
	l.put(1, "a")
	if s, ok := l.get(1); !ok || s != "a" {
		t.Fatalf("get(1) = %q, %v; want \"a\", true", s, ok)
	}
	l.forget(1)
	if _, ok := l.get(1); ok {
		t.Fatal("a forgotten lease is still known")
	}
	for i := range uint64(cacheSize + 10) {
		l.put(i, "s")
	}
	if n := len(l.m); n > cacheSize {
		t.Fatalf("the table holds %d leases, more than its bound %d", n, cacheSize)
	}
	if s, ok := l.get(cacheSize + 9); !ok || s != "s" {
		t.Fatal("the latest lease was evicted")
	}
}
