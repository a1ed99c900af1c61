package config

import (
	"errors"
	"flag"

	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/streams"
)

// Authz configures the authz command: the service that admits batches,
// keeps their records, applies callbacks, and lets the owner pause, resume,
// evict, insert and replay. Its file section is authz:, its environment
// TICKFLOW_AUTHZ_*.
type Authz struct {
	// NATS is the connection. Default: DefaultNATS with Name
	// "tickflow-authz".
	NATS NATS `yaml:"nats"`
	// Embedded, when enabled, starts a nats-server in this process from
	// nats.conf and connects to it in-process (still as the NATS user);
	// other commands attach to its listen address. Default: disabled,
	// connect to NATS.URL.
	Embedded Embedded `yaml:"embedded"`
	// Log is the logging of the command. Default: DefaultLog.
	Log Log `yaml:"log"`
	// Streams sizes the streams, buckets and consumers authz provisions.
	// Default: DefaultStreams.
	Streams Streams `yaml:"streams"`
	// Owner is the identity allowed to pause, resume, evict, insert and
	// replay; one subject token, since callers are known by the subject
	// they may publish on. Default authz.DefaultOwner ("owner").
	Owner string `yaml:"owner"`
	// Table is the path of the authorization table file. Default
	// "authz.yaml".
	Table string `yaml:"table"`
	// Domains are the domains whose processor consumers authz provisions,
	// each one subject token. Default none.
	Domains []string `yaml:"domains"`
}

// DefaultAuthz returns the Authz defaults, which validate.
func DefaultAuthz() Authz {
	n := DefaultNATS()
	n.Name = "tickflow-authz"
	return Authz{
		NATS:     n,
		Embedded: DefaultEmbedded(),
		Log:      DefaultLog(),
		Streams:  DefaultStreams(),
		Owner:    authz.DefaultOwner,
		Table:    "authz.yaml",
	}
}

// Section returns "authz".
func (*Authz) Section() string { return "authz" }

// Validate reports every rule a breaks, joined, each a *FieldError matching
// ErrInvalid whose field starts "authz.".
func (a *Authz) Validate() error {
	errs := []error{
		under("nats", a.NATS.Validate()),
		under("embedded", a.Embedded.Validate()),
		under("log", a.Log.Validate()),
		under("streams", a.Streams.Validate()),
		validateDomains("domains", a.Domains, false),
	}
	if err := streams.ValidateDomain(a.Owner); err != nil {
		errs = append(errs, because("owner", err))
	}
	if a.Table == "" {
		errs = append(errs, invalid("table", "must name the authorization table file"))
	}
	return under(a.Section(), errors.Join(errs...))
}

// Flags registers -owner, -table, -domain and the NATS and log flags on
// fs, writing into a.
func (a *Authz) Flags(fs *flag.FlagSet) {
	fs.StringVar(&a.Owner, "owner", a.Owner, "`identity` allowed to pause, resume, evict, insert and replay")
	fs.StringVar(&a.Table, "table", a.Table, "authorization table `file`")
	domainsFlag(fs, &a.Domains, "`domains` to provision")
	a.NATS.Flags(fs)
	fs.BoolVar(&a.Embedded.Enabled, "embedded", a.Embedded.Enabled, "start a nats-server in this process (see -nats-conf, -data-dir, -listen) instead of connecting to -nats-url")
	a.Embedded.Flags(fs)
	a.Log.Flags(fs)
}
