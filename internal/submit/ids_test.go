package submit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/internal/testnats"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

// TestIDBlocksStayUnique: replicas reserving blocks of ids concurrently,
// and single ids taken meanwhile, never hand out one id twice, and each
// replica's ids increase.
func TestIDBlocksStayUnique(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const replicas, perReplica, takers = 3, 296, 8 // not a multiple of a block
	var mu sync.Mutex
	seen := map[uint64]string{}
	note := func(id uint64, who string) {
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := seen[id]; ok {
			t.Errorf("id %d handed out twice: to %s and to %s", id, prev, who)
		}
		seen[id] = who
	}
	var wg sync.WaitGroup
	for r := range replicas {
		ids := submit.NewIDs(env.JS(t, "authz"))
		for k := range takers {
			wg.Go(func() {
				who := string(rune('a'+r)) + "/" + string(rune('0'+k))
				prev := uint64(0)
				for range perReplica / takers {
					id, err := ids.Next(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if id <= prev {
						t.Errorf("%s: id %d after %d", who, id, prev)
					}
					prev = id
					note(id, who)
				}
			})
		}
	}
	js := env.JS(t, "authz")
	wg.Go(func() {
		for range 50 {
			id, _, err := submit.AssignID(ctx, js, "")
			if err != nil {
				t.Error(err)
				return
			}
			note(id, "single")
		}
	})
	wg.Wait()
	if want := replicas*(perReplica/takers)*takers + 50; len(seen) != want {
		t.Fatalf("%d distinct ids, want %d", len(seen), want)
	}
}

// TestIDBlockReservedAhead: once half of the block in hand is handed out,
// the next block is reserved in the background (the id log takes a
// sequence without a caller waiting for it), and the ids go on from it
// when the first is used up, with no further reservation until half of
// that one is handed out.
func TestIDBlockReservedAhead(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js := env.JS(t, "admin")
	logSeq := func() uint64 {
		s, err := js.Stream(ctx, streams.StreamIDs)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	ids := submit.NewIDs(env.JS(t, "authz"))
	take := func(n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			id, err := ids.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = id
		}
		return out
	}
	half := submit.IDsPerSequence / 2
	first := take(half - 1)
	base := logSeq()
	if first[0] != base*submit.IDsPerSequence {
		t.Fatalf("first id %d, want the block of the log's last sequence %d", first[0], base)
	}
	take(1) // half handed out: the next block is reserved ahead
	testnats.Eventually(t, 10*time.Second, "the next block reserved ahead", func() bool { return logSeq() == base+1 })
	rest := take(half)
	if got, want := rest[len(rest)-1], first[0]+submit.IDsPerSequence-1; got != want {
		t.Fatalf("last id of the first block %d, want %d", got, want)
	}
	next := take(half - 1)
	if got, want := next[0], (base+1)*submit.IDsPerSequence; got != want {
		t.Fatalf("first id after the block %d, want %d (the block reserved ahead)", got, want)
	}
	if got := logSeq(); got != base+1 {
		t.Fatalf("id log at sequence %d, want %d: no reservation before half of the block is out", got, base+1)
	}
}
