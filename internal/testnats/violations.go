package testnats

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tickflow/tickflow/embedded"
)

// ServiceUsers are the nats.conf identities of tickflow's own roles. The
// server must never deny one of them: a denied JetStream call of a service
// (a flow control reply, an API request) fails silently, as a timeout or
// a stalled listing, so every test that starts a server fails when its log
// shows one, unless the test provoked it (Env.ExpectViolation).
var ServiceUsers = []string{"admin", "authz", "processor", "worker", "ticker"}

// violationLine reads the server's log line of a denial: the connection's
// "<account>/user:<user>", then what was denied.
var violationLine = regexp.MustCompile(`"[^"]*/(?:[a-z]+:)?([^"/:]+)" - (Publish Violation - Subject|Publish Violation - Reply|Subscription Violation - Subject) ("(?:[^"\\]|\\.)*")(?:, Queue: ("(?:[^"\\]|\\.)*"))?`)

// violation is one denial the server logged: who, and the text the client
// was sent ("Permissions Violation for Publish to \"x\"").
type violation struct {
	user, text string
}

// violationLog is a nats-server logger that keeps the denials of its log
// and drops everything else.
type violationLog struct {
	mu       sync.Mutex
	seen     []violation
	expected []violation
}

func (l *violationLog) Noticef(string, ...any) {}
func (l *violationLog) Warnf(string, ...any)   {}
func (l *violationLog) Fatalf(string, ...any)  {}
func (l *violationLog) Debugf(string, ...any)  {}
func (l *violationLog) Tracef(string, ...any)  {}

// Errorf keeps the line if it is a denial.
func (l *violationLog) Errorf(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	m := violationLine.FindStringSubmatch(line)
	if m == nil {
		return
	}
	var text string
	switch m[2] {
	case "Publish Violation - Subject":
		text = "Permissions Violation for Publish to " + m[3]
	case "Publish Violation - Reply":
		text = "Permissions Violation for Publish with Reply of " + m[3]
	default:
		text = "Permissions Violation for Subscription to " + m[3]
		if m[4] != "" {
			text += " using queue " + m[4]
		}
	}
	l.mu.Lock()
	l.seen = append(l.seen, violation{user: m[1], text: text})
	l.mu.Unlock()
}

// expect marks denials of user whose text starts with text as provoked.
func (l *violationLog) expect(user, text string) {
	l.mu.Lock()
	l.expected = append(l.expected, violation{user: user, text: text})
	l.mu.Unlock()
}

// unexpected lists the denials of service users nobody expected.
func (l *violationLog) unexpected() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, v := range l.seen {
		if !slices.Contains(ServiceUsers, v.user) {
			continue
		}
		if slices.ContainsFunc(l.expected, func(e violation) bool {
			return e.user == v.user && strings.HasPrefix(v.text, e.text)
		}) {
			continue
		}
		out = append(out, v.user+": "+v.text)
	}
	return out
}

// watchViolations makes srv log its denials to l, and fails t, once the
// server has shut down, if one of them was a service user's that the test
// did not expect. Call it before the server's Close is registered, so
// that the check runs after it: every denial is logged by then.
func watchViolations(t testing.TB, srv *embedded.Server, l *violationLog) {
	srv.SetLoggerV2(l, false, false, false)
	t.Cleanup(func() {
		if v := l.unexpected(); len(v) > 0 {
			t.Errorf("nats-server denied tickflow's own roles what nats.conf should grant them (grant it there, or call ExpectViolation in a test that provokes it):\n  %s",
				strings.Join(slices.Compact(v), "\n  "))
		}
	})
}

// ExpectViolation tells the server-log check that the test provokes the
// server's denial of user whose client-side text starts with text, such as
// `Permissions Violation for Publish to "batches.high.x"`: only a denial
// of a service user (ServiceUsers) needs it.
func (e *Env) ExpectViolation(user, text string) {
	e.violations.expect(user, text)
}
