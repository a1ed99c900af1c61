package chaos

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Kinds of process, as Proc.Kind and Kill.Kind name them.
const (
	KindServer    = "nats-server"
	KindAuthz     = "authz"
	KindProcessor = "processor"
	KindWorker    = "worker"
	KindTicker    = "ticker"
)

// Kill is one kill -9 the suite dealt.
type Kill struct {
	At   time.Time
	Name string
	Kind string
	PID  int
}

// Journal records the kills of a run. It is safe for concurrent use.
type Journal struct {
	mu    sync.Mutex
	kills []Kill
}

func (j *Journal) add(k Kill) {
	j.mu.Lock()
	j.kills = append(j.kills, k)
	j.mu.Unlock()
}

// Kills returns the kills so far, in order.
func (j *Journal) Kills() []Kill {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Kill(nil), j.kills...)
}

// restartDelay is how soon a process that exited by itself is started
// again: a component whose server is down exits, and comes back once it is
// up.
const restartDelay = 500 * time.Millisecond

// Proc is one supervised OS process: started again whenever it exits, until
// Stop. Its standard output and error go to a log file.
type Proc struct {
	Name string
	Kind string

	path    string
	args    []string
	env     []string
	logPath string
	journal *Journal

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the current instance has exited
	down     time.Duration // how long to stay down after the next exit
	stopping bool
	exits    int // exits the suite did not cause
	kills    int
	loop     chan struct{} // closed when the supervisor has returned
	wake     chan struct{} // ends a downtime early (Stop)
}

// newProc returns a process to supervise; Start starts it.
func newProc(name, kind, path string, args, env []string, logPath string, j *Journal) *Proc {
	return &Proc{Name: name, Kind: kind, path: path, args: args, env: env, logPath: logPath, journal: j, wake: make(chan struct{})}
}

// Start starts the process and the supervisor that restarts it.
func (p *Proc) Start() error {
	if err := p.spawn(); err != nil {
		return err
	}
	p.loop = make(chan struct{})
	go p.supervise()
	return nil
}

// spawn starts one instance.
func (p *Proc) spawn() error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "--- %s start %s\n", time.Now().Format(time.RFC3339Nano), p.Name)
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close() // nothing was written to it
		return fmt.Errorf("chaos: start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()   // the exit is judged from the process state, not this error
		_ = logf.Close() // the child wrote its log; the file is only read after this
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	return nil
}

func (p *Proc) supervise() {
	defer close(p.loop)
	for {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		<-exited
		p.mu.Lock()
		if p.stopping {
			p.mu.Unlock()
			return
		}
		down := p.down
		if down == 0 {
			p.exits++
			down = restartDelay
		}
		p.down = 0
		p.mu.Unlock()
		select {
		case <-time.After(down):
		case <-p.wake:
			return
		}
		p.mu.Lock()
		stopping := p.stopping
		p.mu.Unlock()
		if stopping {
			return
		}
		for p.spawn() != nil {
			select {
			case <-time.After(restartDelay):
			case <-p.wake:
				return
			}
		}
	}
}

// PID is the process id of the running instance, 0 when none runs.
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil || isClosed(p.exited) {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill sends SIGKILL to the running instance and waits until it is gone;
// the supervisor starts it again after down. It reports whether an
// instance was running.
func (p *Proc) Kill(down time.Duration) bool {
	p.mu.Lock()
	if p.stopping || p.cmd == nil || isClosed(p.exited) {
		p.mu.Unlock()
		return false
	}
	cmd, exited := p.cmd, p.exited
	p.down = max(down, time.Millisecond)
	p.kills++
	p.mu.Unlock()
	p.journal.add(Kill{At: time.Now(), Name: p.Name, Kind: p.Kind, PID: cmd.Process.Pid})
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	return true
}

// Stop ends supervision and stops the running instance: SIGTERM, then
// SIGKILL after grace.
func (p *Proc) Stop(grace time.Duration) {
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		return
	}
	p.stopping = true
	close(p.wake)
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd != nil && !isClosed(exited) {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(grace):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
	}
	if p.loop != nil {
		<-p.loop
	}
}

// Counts returns how often the process was killed by the suite and how
// often it exited by itself.
func (p *Proc) Counts() (kills, exits int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kills, p.exits
}

// LogContains reports whether the process's log holds s.
func (p *Proc) LogContains(s string) bool {
	b, err := os.ReadFile(p.logPath)
	return err == nil && bytes.Contains(b, []byte(s))
}

// LogTail returns the last n lines of the process's log.
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func isClosed(c chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// childEnv is the environment of a child process: this one's without any
// NATS_ or TICKFLOW_ variable, so only what the suite sets configures it.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "NATS_") || strings.HasPrefix(kv, "TICKFLOW_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}
