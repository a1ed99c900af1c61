package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Component is the config of one tickflow command: *Processor, *Worker,
// *Tick, *Authz or *Run.
type Component interface {
	// Section is the key of the component's section in the config file and
	// the second word of its environment variables: "processor" reads
	// processor: in the file and TICKFLOW_PROCESSOR_*.
	Section() string
	// Flags registers the component's command-line flags on fs, writing
	// into the component.
	Flags(fs *flag.FlagSet)
	// Validate reports every rule the component breaks, joined, each a
	// *FieldError matching ErrInvalid.
	Validate() error
}

// file is the layout of a tickflow config file: one section per command, so
// a single file can serve a whole deployment. Each command reads its own
// section; every section is still decoded so that a misspelt key anywhere
// is reported.
type file struct {
	Processor *Processor `yaml:"processor"`
	Worker    *Worker    `yaml:"worker"`
	Tick      *Tick      `yaml:"tick"`
	Authz     *Authz     `yaml:"authz"`
	Run       *Run       `yaml:"run"`
}

// Load fills cfg, which already holds its defaults, from the config file at
// path and then from the environment, so the environment wins over the
// file. An empty path skips the file. env looks a variable up, as os.Getenv
// does; an empty value counts as unset.
//
// The file is YAML with one section per command (see tickflow.example.yaml);
// Load reads the section named by cfg.Section() and merges it field by field
// over cfg, so a field the file leaves out keeps its default and a list the
// file sets replaces the default list. Decoding is strict: an unknown key in
// any section, or a value of the wrong type, is an error matching ErrInvalid
// that names the key and its line.
//
// The environment is read as TICKFLOW_<SECTION>_<KEY>, the upper-cased yaml
// keys of the field's path joined by underscores (processor.nats.url is
// TICKFLOW_PROCESSOR_NATS_URL, processor.streams.ack_wait is
// TICKFLOW_PROCESSOR_STREAMS_ACK_WAIT). The NATS section also reads the
// standard NATS_URL, NATS_USER, NATS_PASSWORD, NATS_CREDS and NATS_NKEY,
// which the TICKFLOW_ names override. Lists are comma-separated, durations
// are parsed by time.ParseDuration, booleans by strconv.ParseBool. A value
// that does not parse is a *FieldError matching ErrInvalid that names the
// variable. EnvVars lists every name.
//
// Load does not validate: apply flags, then call cfg.Validate. Parse does
// all of it.
func Load(path string, cfg Component, env func(string) string) error {
	if v := reflect.ValueOf(cfg); v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("config: Load needs a non-nil pointer to a config struct, got %T", cfg)
	}
	if path != "" {
		if err := loadFile(path, cfg); err != nil {
			return err
		}
	}
	return applyEnv(cfg.Section(), cfg, env)
}

func loadFile(path string, cfg Component) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	f := file{
		Processor: new(DefaultProcessor()),
		Worker:    new(DefaultWorker()),
		Tick:      new(DefaultTick()),
		Authz:     new(DefaultAuthz()),
		Run:       new(DefaultRun()),
	}
	switch c := cfg.(type) {
	case *Processor:
		f.Processor = c
	case *Worker:
		f.Worker = c
	case *Tick:
		f.Tick = c
	case *Authz:
		f.Authz = c
	case *Run:
		f.Run = c
	default:
		return fmt.Errorf("config: Load cannot read a %T from a file", cfg)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return yamlError(path, err)
	}
	return nil
}

// yamlError turns a decoding error into FieldErrors for path, one per
// problem, each naming its line. yaml names Go types ("field concurency
// not found in type config.Processor"); the file's author knows sections,
// so unknown keys are reworded in those terms.
func yamlError(path string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return &FieldError{Field: path, Rule: strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	}
	// Compiled here rather than once per package: it runs only on a bad
	// file, and the package keeps no state.
	unknownKey := regexp.MustCompile(`^(line \d+): field (\S+) not found in type config\.(\w+)$`)
	errs := make([]error, 0, len(te.Errors))
	for _, msg := range te.Errors {
		if m := unknownKey.FindStringSubmatch(msg); m != nil {
			where := "section " + strings.ToLower(m[3])
			if m[3] == "file" {
				where = "the top level, which has the sections processor, worker, tick, authz and run"
			}
			msg = fmt.Sprintf("%s: unknown key %q in %s", m[1], m[2], where)
		}
		errs = append(errs, &FieldError{Field: path, Rule: msg, Err: err})
	}
	return errors.Join(errs...)
}

// Parse configures one command from its command line: it registers
// -config (default $TICKFLOW_CONFIG) and cfg's flags on fs, parses args,
// loads the file and the environment into cfg with Load, re-applies the
// flags given on the command line so they win over both, and validates.
//
// cfg must hold its defaults, e.g. from DefaultProcessor. Precedence, lowest
// first: defaults, file, environment, flags. Parse returns flag.ErrHelp
// unwrapped when args ask for help, so main can exit 0.
func Parse(fs *flag.FlagSet, args []string, cfg Component, env func(string) string) error {
	path := fs.String("config", env("TICKFLOW_CONFIG"), "YAML config `file` (env TICKFLOW_CONFIG)")
	cfg.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The flags wrote into cfg during Parse; Load is about to overwrite
	// them, so keep the values given, as text, and set them again after.
	type given struct{ name, value string }
	var set []given
	fs.Visit(func(f *flag.Flag) { set = append(set, given{f.Name, f.Value.String()}) })
	if err := Load(*path, cfg, env); err != nil {
		return err
	}
	for _, g := range set {
		if err := fs.Set(g.name, g.value); err != nil {
			return fmt.Errorf("config: re-applying -%s: %w", g.name, err)
		}
	}
	return cfg.Validate()
}
