package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// postgresBins is where Debian's postgresql package puts each major
// version's server binaries.
const postgresBins = "/usr/lib/postgresql/*/bin"

// errNoPostgres says how to get PostgreSQL.
var errNoPostgres = errors.New("river: no initdb and postgres under " + postgresBins + ": `apt-get install -y postgresql` is needed (make bench installs it)")

// pgProc is a PostgreSQL server the harness started.
type pgProc struct {
	cmd *exec.Cmd
	dir string
	url string
	log string
	// exited is closed once the postmaster has exited and been waited for.
	exited chan struct{}
}

// postgresBinDir is the bin directory of the newest PostgreSQL installed.
func postgresBinDir() (string, error) {
	dirs, _ := filepath.Glob(postgresBins)
	var ok []string
	for _, d := range dirs {
		_, e1 := os.Stat(filepath.Join(d, "initdb"))
		_, e2 := os.Stat(filepath.Join(d, "postgres"))
		if e1 == nil && e2 == nil {
			ok = append(ok, d)
		}
	}
	if len(ok) == 0 {
		return "", errNoPostgres
	}
	// /usr/lib/postgresql/<major>/bin: the highest major wins.
	major := func(d string) int { v, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return v }
	slices.SortFunc(ok, func(a, b string) int { return major(a) - major(b) })
	return ok[len(ok)-1], nil
}

// startPostgres creates a database cluster with initdb in its own temp dir
// and starts postgres on a free loopback port with the cluster's defaults
// (fsync, synchronous commit and full-page writes on), then waits until
// the postmaster says it is ready. PostgreSQL refuses to run as root: as
// root, both run as the postgres user the package creates.
func startPostgres(cfg *config) (*pgProc, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	dir, err := os.MkdirTemp(cfg.tmpDir, "tickflow-bench-postgres-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	data, logPath := filepath.Join(dir, "data"), filepath.Join(dir, "postgres.log")
	p := &pgProc{dir: dir, log: logPath,
		url: fmt.Sprintf("postgres://bench@127.0.0.1:%d/postgres?sslmode=disable", port)}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "bench", "--auth=trust", "-E", "UTF8", "--locale=C")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		hint := ""
		if cred != nil {
			hint = fmt.Sprintf(" (as root, PostgreSQL runs as the postgres user, which must be able to reach -tmp %s)", cfg.tmpDir)
		}
		return nil, fmt.Errorf("river: initdb%s: %w: %s", hint, err, lastLines(out, 5))
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	defer logFile.Close()
	p.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir, "-h", "127.0.0.1")
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := p.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("river: start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for !postmasterReady(data) {
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("river: postgres exited: %s", lastLines(log, 5))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stopWith(exited)
			return nil, fmt.Errorf("river: postgres on port %d was not ready within 30s", port)
		}
	}
	p.exited = exited
	return p, nil
}

// postgresCredential is the user initdb and postgres run as: nil (this
// process's) unless this process is root, then the postgres user.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("river: PostgreSQL does not run as root and there is no postgres user to run it as (the postgresql package creates one): %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("river: the postgres user has uid %q, gid %q: want numbers", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// postmasterReady says whether the postmaster of the cluster in data
// accepts connections: the status line of postmaster.pid (its eighth)
// reads "ready".
func postmasterReady(data string) bool {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	return len(lines) >= 8 && strings.TrimSpace(lines[7]) == "ready"
}

// stop shuts the server down (fast shutdown, by its pid) and removes its
// directory.
func (p *pgProc) stop() { p.stopWith(p.exited) }

func (p *pgProc) stopWith(exited chan struct{}) {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-exited
	}
	_ = os.RemoveAll(p.dir)
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// How the River program inserts: InsertMany calls of riverChunk jobs,
// riverInserters of them in flight at once.
const (
	riverChunk     = 1000
	riverInserters = 4
)

// riverResult is what the River program (bench/river) reports of one run.
type riverResult struct {
	N             int     `json:"n"`
	InsertSeconds float64 `json:"insert_s"`
	DrainSeconds  float64 `json:"drain_s"`
	InsertCPU     float64 `json:"insert_cpu_s"`
	DrainCPU      float64 `json:"drain_cpu_s"`
	InsertPGCPU   float64 `json:"insert_pg_cpu_s"`
	DrainPGCPU    float64 `json:"drain_pg_cpu_s"`
	PGCPUKnown    bool    `json:"pg_cpu_known"`
}

var riverBuild struct {
	once sync.Once
	path string
	err  error
}

// buildRiver compiles the River program (its own module, bench/river) into
// a temp dir once per bench run, or returns the one -river-bin names.
func buildRiver(cfg *config) (string, error) {
	if cfg.riverBin != "" {
		return cfg.riverBin, nil
	}
	riverBuild.once.Do(func() {
		dir, err := os.MkdirTemp(cfg.tmpDir, "tickflow-bench-riverbin-")
		if err != nil {
			riverBuild.err = err
			return
		}
		out := filepath.Join(dir, "river")
		cmd := exec.Command("go", "build", "-o", out, ".")
		cmd.Dir = cfg.riverDir
		if b, err := cmd.CombinedOutput(); err != nil {
			riverBuild.err = fmt.Errorf("river: go build in %s: %w: %s", cfg.riverDir, err, lastLines(b, 10))
			return
		}
		riverBuild.path = out
	})
	return riverBuild.path, riverBuild.err
}

// cleanRiverBuild removes the compiled River program.
func cleanRiverBuild() {
	if riverBuild.path != "" {
		_ = os.RemoveAll(filepath.Dir(riverBuild.path))
	}
}

// runRiver starts a fresh PostgreSQL, then runs the River program against
// it: n no-op jobs inserted with InsertMany, then drained by a client of
// -river-workers workers until River has recorded each completed.
func runRiver(cfg *config, n int) (*riverResult, error) {
	exe, err := buildRiver(cfg)
	if err != nil {
		return nil, err
	}
	pg, err := startPostgres(cfg)
	if err != nil {
		return nil, err
	}
	defer pg.stop()
	cmd := exec.Command(exe, "-url", pg.url, "-n", strconv.Itoa(n),
		"-max-workers", strconv.Itoa(cfg.riverWorkers),
		"-chunk", strconv.Itoa(riverChunk), "-inserters", strconv.Itoa(riverInserters), "-fetch-cooldown", cfg.riverCooldown.String(),
		"-pg-pid", strconv.Itoa(pg.cmd.Process.Pid), "-stall", cfg.stall.String())
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		log, _ := os.ReadFile(pg.log)
		return nil, fmt.Errorf("river: %w (postgres log: %s)", err, lastLines(log, 5))
	}
	var r riverResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("river said %q: %w", stdout.String(), err)
	}
	if r.N != n || r.InsertSeconds <= 0 || r.DrainSeconds <= 0 {
		return nil, fmt.Errorf("river reported %+v for %d jobs", r, n)
	}
	return &r, nil
}
