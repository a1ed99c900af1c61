package config

import (
	"errors"
	"flag"
	"net"
	"strconv"
)

// Embedded configures the nats-server a command runs inside its own process.
type Embedded struct {
	// Enabled starts the embedded server. Default false; true for the run
	// command (DefaultRun), which has no other server to connect to.
	Enabled bool `yaml:"enabled"`
	// ConfigFile is the nats-server configuration file to load: accounts,
	// users and their permissions. Relative paths are relative to the
	// working directory. Default "nats.conf".
	ConfigFile string `yaml:"config_file"`
	// DataDir is the directory JetStream keeps its store in. Default "data".
	DataDir string `yaml:"data_dir"`
	// Listen is the host:port the embedded server accepts clients on, so
	// natscli and separately started commands can attach. Default
	// "127.0.0.1:4222".
	Listen string `yaml:"listen"`
}

// DefaultEmbedded returns the Embedded defaults, with Enabled false.
func DefaultEmbedded() Embedded {
	return Embedded{
		ConfigFile: "nats.conf",
		DataDir:    "data",
		Listen:     "127.0.0.1:4222",
	}
}

// Validate reports every rule e breaks, as FieldErrors matching ErrInvalid
// with fields relative to the section. A disabled server is not checked.
func (e Embedded) Validate() error {
	if !e.Enabled {
		return nil
	}
	var errs []error
	if e.ConfigFile == "" {
		errs = append(errs, invalid("config_file", "must not be empty: the server's permissions come from it"))
	}
	if e.DataDir == "" {
		errs = append(errs, invalid("data_dir", "must not be empty: JetStream needs a store directory"))
	}
	if err := validateHostPort(e.Listen); err != nil {
		errs = append(errs, invalid("listen", "%s", err))
	}
	return errors.Join(errs...)
}

func validateHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New(strconv.Quote(s) + " must be host:port, e.g. 127.0.0.1:4222")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return errors.New(strconv.Quote(s) + " must have a port from 1 to 65535")
	}
	return nil
}

// Flags registers -nats-conf, -data-dir and -listen on fs, writing into e.
func (e *Embedded) Flags(fs *flag.FlagSet) {
	fs.StringVar(&e.ConfigFile, "nats-conf", e.ConfigFile, "embedded nats-server config `file`")
	fs.StringVar(&e.DataDir, "data-dir", e.DataDir, "embedded JetStream store `directory`")
	fs.StringVar(&e.Listen, "listen", e.Listen, "`host:port` the embedded nats-server listens on")
}
