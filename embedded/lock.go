package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrDataDirInUse is returned by Start when another server, in this process
// or another, holds the data dir: two servers on one store would hand out
// the same batch ids and lose each other's writes.
var ErrDataDirInUse = errors.New("embedded: data dir in use")

// LockFile is the file in the data dir that the running server holds an
// exclusive lock on; it names the process holding it. nats-server does not
// lock its store dir itself.
const LockFile = "tickflow.lock"

// maxHolder caps what is quoted from a lock file in an error.
const maxHolder = 200

// dirLock is an exclusive lock on a data dir, held until release.
type dirLock struct {
	f *os.File // nil where locks are not supported
}

// lockDataDir creates dir if need be and takes its lock, or says, with
// ErrDataDirInUse, which process holds it.
func lockDataDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded: data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded: lock file %s: %w", path, err)
	}
	held, err := tryLock(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("embedded: lock %s: %w", path, err)
	}
	if !held {
		buf := make([]byte, maxHolder)
		n, _ := f.ReadAt(buf, 0)
		_ = f.Close()
		holder := strings.TrimSpace(strings.ToValidUTF8(string(buf[:n]), "?"))
		if holder == "" {
			holder = "another process"
		}
		return nil, fmt.Errorf("%w: %s is held by %s (lock file %s); stop that one, or give this one another data dir",
			ErrDataDirInUse, dir, holder, path)
	}
	l := &dirLock{f: f}
	l.describe("")
	return l, nil
}

// describe writes who holds the lock into the lock file, for the error a
// second server gets; url is where the server listens, if it does.
func (l *dirLock) describe(url string) {
	if l == nil || l.f == nil {
		return
	}
	host, _ := os.Hostname()
	s := fmt.Sprintf("pid %d (%s) on %s since %s", os.Getpid(), filepath.Base(os.Args[0]), host, time.Now().Format(time.RFC3339))
	if url != "" {
		s += ", listening on " + url
	}
	_ = l.f.Truncate(0)
	_, _ = l.f.WriteAt([]byte(s+"\n"), 0)
}

// release gives the lock up. The file stays: removing it could let two
// servers lock different files of the same name.
func (l *dirLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Close()
}
