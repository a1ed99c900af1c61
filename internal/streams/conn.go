package streams

import (
	"errors"
	"fmt"
	neturl "net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Credentials say where and as whom a component connects.
type Credentials struct {
	// URL of the server; ignored when connecting in-process.
	URL string
	// User and Password authenticate with a user of nats.conf.
	User, Password string
	// Creds is the path of a .creds file (JWT + nkey seed).
	Creds string
	// NKey is the path of an nkey seed file.
	NKey string
	// Name names the connection in server monitoring.
	Name string
	// InboxPrefix is the reply-subject prefix the role may subscribe to.
	// Default "_INBOX_<User>" when User is set, else the NATS default.
	InboxPrefix string
}

// Connect opens a connection with reconnects on and a short, explicit
// timeout; extra options (such as an embedded server's InProcess) come last.
func Connect(c Credentials, extra ...nats.Option) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(c.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second),
		// No reconnect buffer: a write made while disconnected fails at
		// once instead of waiting in the client to land after the
		// reconnect, when its caller has long given up on it and moved on
		// (a progress record written after its batch finished elsewhere).
		nats.ReconnectBufSize(-1),
	}
	switch {
	case c.Creds != "":
		opts = append(opts, nats.UserCredentials(c.Creds))
	case c.NKey != "":
		o, err := nats.NkeyOptionFromSeed(c.NKey)
		if err != nil {
			return nil, fmt.Errorf("streams: nkey seed %s: %w", c.NKey, err)
		}
		opts = append(opts, o)
	case c.User != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	prefix := c.InboxPrefix
	if prefix == "" && c.User != "" {
		prefix = InboxPrefix(c.User)
	}
	if prefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(prefix))
	}
	opts = append(opts, extra...)
	url := c.URL
	if url == "" {
		url = nats.DefaultURL
	}
	var nc *nats.Conn
	var err error
	// The server may send its first RTT PING before the PONG that completes
	// the handshake (nats-server issue 1174); the client then fails the
	// connect with "expected 'PONG', got 'PING'". It is transient: try again.
	for attempt := 0; attempt < 3; attempt++ {
		nc, err = nats.Connect(url, opts...)
		if err == nil || !strings.Contains(err.Error(), "expected 'PONG'") {
			break
		}
	}
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) {
			return nil, fmt.Errorf("streams: connect as %q: authorization refused: check the user and password (or creds): %w", c.User, err)
		}
		return nil, fmt.Errorf("streams: connect to %s: %w", RedactURL(url), err)
	}
	return nc, nil
}

// RedactURL replaces the password of every user:password@ in a
// comma-separated list of server URLs with "xxxxx", for logs and errors.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
