package submit_test

import (
	"context"
	"sync"
	"testing"
	"time"

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
