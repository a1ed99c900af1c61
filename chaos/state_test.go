package chaos_test

import (
	"testing"
	"time"

	"github.com/tickflow/tickflow/chaos"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// TestReadStateFindsClaims: the claims a run left behind are found both
// under a function's own completion key and inside a unit group, where
// only claim entries count (not records or released runs).
func TestReadStateFindsClaims(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, 30*time.Second)
	kv, err := env.JS(t, "admin").KeyValue(ctx, streams.BucketResults)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Minute)
	put := func(key string, b []byte) {
		t.Helper()
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	put(streams.ResultKey(1, 0, 0), must(records.Encode(&records.Completion{Running: true, Until: until, Worker: "w"})))
	put(streams.ResultKey(2, 0, 0), must(records.Encode(&records.Completion{Worker: "w"})))
	put(streams.UnitGroupKey(64), must(records.Encode(&records.UnitGroup{Units: []records.UnitEntry{
		{Key: streams.ResultKey(65, -1, 0), Running: true, Claim: 1, Until: until, Worker: "w"},
		{Key: streams.ResultKey(66, -1, 0), Claim: 2, Until: until, Worker: "w"},
		{Key: streams.ResultKey(67, -1, 1), Released: true, Claim: 3, Until: until},
	}})))
	st, err := chaos.ReadState(ctx, env.Conn(t, "admin"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Claims) != 2 || len(st.Claims[1]) != 1 || len(st.Claims[65]) != 1 || st.Claims[65][0] != streams.ResultKey(65, -1, 0) {
		t.Fatalf("claims %v, want batch 1's and unit 65's", st.Claims)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
