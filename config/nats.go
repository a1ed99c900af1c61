package config

import (
	"errors"
	"flag"
	"fmt"
	"github.com/tickflow/tickflow/internal/streams"
	"log/slog"
	"net/url"
	"strings"
)

// DefaultNATSURL is the server a command that runs no embedded server
// connects to when NATS.URL is empty. It is nats.go's own default.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// redacted replaces a secret wherever a config is printed or logged.
const redacted = "[REDACTED]"

// NATS says how a command connects to NATS. At most one way of
// authenticating may be set: user and password, a creds file, or an nkey
// seed file; none means an anonymous connection.
//
// The password is never printed: NATS implements slog.LogValuer and
// fmt.Stringer with the password replaced, and leaves it out of JSON.
type NATS struct {
	// URL is the server to connect to: nats://, tls://, ws:// or wss://,
	// several separated by commas for a cluster. Environment NATS_URL.
	// Default "": the embedded server when the command runs one, else
	// DefaultNATSURL (nats://127.0.0.1:4222); see ServerURL.
	URL string `yaml:"url" env:"NATS_URL"`
	// User is the user name to authenticate with, together with Password.
	// Environment NATS_USER. Default "": no user.
	User string `yaml:"user" env:"NATS_USER"`
	// Password goes with User. Prefer the environment (NATS_PASSWORD) to a
	// file. It is never logged. Default "".
	Password string `yaml:"password" env:"NATS_PASSWORD" json:"-"`
	// Creds is the path of a .creds file (a user JWT and its nkey seed).
	// Environment NATS_CREDS. Default "": none.
	Creds string `yaml:"creds" env:"NATS_CREDS"`
	// NKey is the path of a file holding an nkey seed. Environment
	// NATS_NKEY. Default "": none.
	NKey string `yaml:"nkey" env:"NATS_NKEY"`
	// Name is the client connection name the server shows in its monitoring
	// and in `nats server report connections`. Default: "tickflow-<command>",
	// set by each command's Default function.
	Name string `yaml:"name"`
}

// DefaultNATS returns the NATS defaults: every field empty.
func DefaultNATS() NATS { return NATS{} }

// ServerURL returns URL, or DefaultNATSURL when URL is empty. A command
// that runs an embedded server should use the embedded server's address
// instead of calling it with an empty URL.
func (n NATS) ServerURL() string {
	if n.URL == "" {
		return DefaultNATSURL
	}
	return n.URL
}

// Validate reports every rule n breaks, as FieldErrors matching ErrInvalid
// with fields relative to the section ("url", "password", …).
func (n NATS) Validate() error {
	var errs []error
	if n.URL != "" {
		for _, u := range strings.Split(n.URL, ",") {
			if err := validateServerURL(strings.TrimSpace(u)); err != nil {
				errs = append(errs, invalid("url", "%s", err))
			}
		}
	}
	if n.Password != "" && n.User == "" {
		errs = append(errs, invalid("password", "is set but user is empty: a password needs a user"))
	}
	var ways []string
	if n.User != "" {
		ways = append(ways, "user")
	}
	if n.Creds != "" {
		ways = append(ways, "creds")
	}
	if n.NKey != "" {
		ways = append(ways, "nkey")
	}
	if len(ways) > 1 {
		errs = append(errs, invalid(ways[1], "must not be set together with %s: choose one of user/password, creds or nkey", ways[0]))
	}
	return errors.Join(errs...)
}

func validateServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", s, err)
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return fmt.Errorf("%q must start with nats://, tls://, ws:// or wss://", s)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%q has no host", s)
	}
	return nil
}

// LogValue logs n as a group with the password replaced by "[REDACTED]",
// so slog.Any("nats", cfg.NATS) is safe.
func (n NATS) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("url", RedactURL(n.URL)),
		slog.String("user", n.User),
	}
	if n.Password != "" {
		attrs = append(attrs, slog.String("password", redacted))
	}
	attrs = append(attrs,
		slog.String("creds", n.Creds),
		slog.String("nkey", n.NKey),
		slog.String("name", n.Name),
	)
	return slog.GroupValue(attrs...)
}

// String formats n for people with the password replaced by "[REDACTED]".
// fmt uses it for %v and %+v, also when n is a field of a larger config.
func (n NATS) String() string {
	pw := ""
	if n.Password != "" {
		pw = redacted
	}
	return fmt.Sprintf("{URL:%s User:%s Password:%s Creds:%s NKey:%s Name:%s}", RedactURL(n.URL), n.User, pw, n.Creds, n.NKey, n.Name)
}

// RedactURL replaces the password of every user:password@ in a
// comma-separated list of server URLs with "xxxxx".
func RedactURL(urls string) string { return streams.RedactURL(urls) }

// GoString makes %#v redact the password too.
func (n NATS) GoString() string { return "config.NATS" + n.String() }

// Flags registers -nats-url, -nats-user, -nats-creds, -nats-nkey and
// -nats-name on fs, writing into n. There is deliberately no password flag:
// command lines are visible to every user of the machine; use NATS_PASSWORD.
func (n *NATS) Flags(fs *flag.FlagSet) {
	fs.StringVar(&n.URL, "nats-url", n.URL, "NATS server `url`s, comma-separated (env NATS_URL; empty: "+DefaultNATSURL+")")
	fs.StringVar(&n.User, "nats-user", n.User, "NATS `user`; the password comes from NATS_PASSWORD (env NATS_USER)")
	fs.StringVar(&n.Creds, "nats-creds", n.Creds, "`path` of a NATS .creds file (env NATS_CREDS)")
	fs.StringVar(&n.NKey, "nats-nkey", n.NKey, "`path` of a NATS nkey seed file (env NATS_NKEY)")
	fs.StringVar(&n.Name, "nats-name", n.Name, "client connection `name` shown by the server")
}
