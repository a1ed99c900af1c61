package chaos_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tickflow/tickflow/chaos"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// shortScenarios are the scenarios TestChaosShort runs, cut down.
var shortScenarios = "kill-processors,kill-workers,kill-authz"

// TestChaosShort builds the commands and runs the process-kill scenarios
// briefly against them as separate processes: processors, workers and
// authz killed (-9) at random moments while batches are submitted and
// processed, then every invariant of the chaos checker. make chaos runs
// every scenario at full size. TICKFLOW_CHAOS_SEED sets the seed (default
// 1).
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the commands and runs them for about half a minute")
	}
	seed := uint64(1)
	if s := os.Getenv("TICKFLOW_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TICKFLOW_CHAOS_SEED=%q: expected a number", s)
		}
		seed = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	root, err := chaos.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, err := chaos.Build(ctx, root, filepath.Join(dir, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	scenarios, err := chaos.Select(shortScenarios)
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	o := chaos.Options{Seed: seed, Dir: dir, Root: root, Bin: bin, Progress: &progress}
	for _, sc := range scenarios {
		sc.Batches, sc.Spread = 30, 8*time.Second
		t.Run(sc.Name, func(t *testing.T) {
			r := chaos.Run(ctx, sc, 1, o)
			var out bytes.Buffer
			chaos.Report(&out, sc, []*chaos.Result{r})
			t.Log(out.String())
			if !r.Passed() {
				t.Log(progress.String())
				t.Fatalf("%s failed with seed %d", sc.Name, seed)
			}
		})
	}
}
