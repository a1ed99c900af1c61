package streams

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/logging"
)

// A reply subject is chosen by the caller. A service answers with its own
// rights, which reach streams and buckets its callers may not touch, so a
// reply aimed at such a subject would be a write on the caller's behalf (a
// confused deputy). Every service therefore answers only into inboxes: the
// NATS default prefix "_INBOX." or a role's own "_INBOX_<user>.". No stream
// captures an inbox subject (TestNoStreamCapturesInboxes), and Reply below
// is the one place every service's answers go through.

// inboxRoot begins every inbox subject: the NATS default prefix is
// "_INBOX." and a role's own is "_INBOX_<user>.".
const inboxRoot = "_INBOX"

// InboxPrefix is the reply-subject prefix of user: nats.conf lets each role
// receive replies only under its own prefix.
func InboxPrefix(user string) string { return inboxRoot + "_" + user }

// IsInbox reports whether subject is a literal subject under an inbox
// prefix: "_INBOX.<token>…" or "_INBOX_<user>.<token>…".
func IsInbox(subject string) bool {
	if !strings.HasPrefix(subject, inboxRoot) || strings.ContainsAny(subject, "*> \t\r\n") {
		return false
	}
	first, rest, ok := strings.Cut(subject, ".")
	if !ok || rest == "" || strings.Contains(subject, "..") || strings.HasSuffix(subject, ".") {
		return false
	}
	return first == inboxRoot || (len(first) > len(inboxRoot)+1 && first[len(inboxRoot)] == '_')
}

// IsInboxOf reports whether subject is an inbox of user: under
// InboxPrefix(user)+".".
func IsInboxOf(subject, user string) bool {
	return IsInbox(subject) && strings.HasPrefix(subject, InboxPrefix(user)+".")
}

// CheckReply returns nil when a request may be answered on reply: when reply
// is empty (nothing to answer) or an inbox. Otherwise it returns an error
// matching ErrReplyRefused that names the subject, capped.
func CheckReply(reply string) error {
	if reply == "" || IsInbox(reply) {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrReplyRefused, logging.Capped(reply))
}

// LogReplyRefused is the message every service logs, at Warn, when it
// refuses a request because of its reply subject.
const LogReplyRefused = "request refused: reply subject is not an inbox"

// Reply answers a request on its reply subject with data, or, when code is
// set, with a micro-service error (the Nats-Service-Error-Code and
// Nats-Service-Error headers). It publishes nothing and returns an error
// matching ErrReplyRefused unless reply is an inbox (see CheckReply); an
// empty reply answers nothing. Services that answer from another goroutine
// than the micro handler's use it too: a micro.Request is not safe to answer
// concurrently with its handler's return.
func Reply(nc *nats.Conn, reply string, data []byte, code, description string) error {
	if reply == "" {
		return nil
	}
	if err := CheckReply(reply); err != nil {
		return err
	}
	m := nats.NewMsg(reply)
	m.Data = data
	if code != "" {
		m.Header.Set(micro.ErrorCodeHeader, code)
		m.Header.Set(micro.ErrorHeader, description)
	}
	return nc.PublishMsg(m)
}
