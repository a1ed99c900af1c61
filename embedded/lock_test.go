package embedded_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/testnats"
)

// TestDataDirLocked: a second server on a data dir in use is refused, with
// an error naming the dir and the process holding it, whatever its port;
// once the first has shut down, the dir can be used again.
func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	opts := embedded.Options{ConfigFile: testnats.ConfigPath(t), DataDir: dir, Listen: "127.0.0.1:0"}
	first, err := embedded.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	for _, o := range []embedded.Options{
		opts, // another free port
		{ConfigFile: opts.ConfigFile, DataDir: dir, DontListen: true},
	} {
		second, err := embedded.Start(o)
		if err == nil {
			second.Close()
			t.Fatalf("a second server started on %s, in use by the first", dir)
		}
		if !errors.Is(err, embedded.ErrDataDirInUse) {
			t.Fatalf("error %v, want ErrDataDirInUse", err)
		}
		for _, want := range []string{dir, fmt.Sprintf("pid %d", os.Getpid()), first.URL()} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not say %q", err, want)
			}
		}
	}
	if !first.Running() {
		t.Fatal("the refused start stopped the first server")
	}
	first.Close()
	first.Close() // idempotent
	again, err := embedded.Start(opts)
	if err != nil {
		t.Fatalf("start after the first shut down: %v", err)
	}
	again.Close()
}
