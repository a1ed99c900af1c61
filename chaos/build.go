package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Binaries are the paths of the built commands.
type Binaries struct {
	NATSServer string
	Authz      string
	Processor  string
	Tick       string
	Worker     string
}

// FindRoot returns the repository root: the nearest directory above the
// working directory holding go.mod.
func FindRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNoRepository
		}
		dir = parent
	}
}

// Build compiles nats-server, authz, processor, tick and the chaos worker
// from the repository at root into dir, in one go build.
func Build(ctx context.Context, root, dir string) (Binaries, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return Binaries{}, fmt.Errorf("%w: the go command must be on PATH: %w", ErrBuild, err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", dir+string(filepath.Separator),
		"github.com/nats-io/nats-server/v2", "./cmd/authz", "./cmd/processor", "./cmd/tick", "./chaos/cmd/chaos-worker")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return Binaries{}, fmt.Errorf("%w: %w\n%s", ErrBuild, err, out.String())
	}
	b := Binaries{
		NATSServer: filepath.Join(dir, "nats-server"),
		Authz:      filepath.Join(dir, "authz"),
		Processor:  filepath.Join(dir, "processor"),
		Tick:       filepath.Join(dir, "tick"),
		Worker:     filepath.Join(dir, "chaos-worker"),
	}
	for _, p := range []string{b.NATSServer, b.Authz, b.Processor, b.Tick, b.Worker} {
		if _, err := os.Stat(p); err != nil {
			return Binaries{}, fmt.Errorf("%w: %s missing after go build: %w", ErrBuild, p, err)
		}
	}
	return b, nil
}
