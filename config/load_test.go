package config

import (
	"errors"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeEnv looks variables up in m, as os.Getenv would.
func fakeEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func noEnv(string) string { return "" }

// writeFile writes content to a file in a fresh temporary directory.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tickflow.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// components returns a fresh default of every command's config.
func components() []Component {
	return []Component{
		new(DefaultProcessor()),
		new(DefaultWorker()),
		new(DefaultTick()),
		new(DefaultAuthz()),
		new(DefaultRun()),
	}
}

func TestExampleFileLoadsAndValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range components() {
		t.Run(cfg.Section(), func(t *testing.T) {
			t.Parallel()
			if err := Load("../tickflow.example.yaml", cfg, noEnv); err != nil {
				t.Fatalf("Load: %v", err)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
}

// TestExampleAuthzNeedsNoAdmin: the documented `authz -config
// tickflow.example.yaml`, run as the authz user, must not provision:
// creating streams needs admin rights, which authz lacks.
func TestExampleAuthzNeedsNoAdmin(t *testing.T) {
	t.Parallel()
	cfg := DefaultAuthz()
	if err := Load("../tickflow.example.yaml", &cfg, noEnv); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Domains) != 0 {
		t.Fatalf("the example's authz section provisions %v, which the authz user may not do", cfg.Domains)
	}
}

// TestExampleFileShowsDefaults keeps the example honest: apart from the
// values it marks as not defaults, loading it changes nothing.
func TestExampleFileShowsDefaults(t *testing.T) {
	t.Parallel()
	notDefaults := map[string]func(Component){
		"processor": func(c Component) { c.(*Processor).Domains = []string{"payments", "reports"} },
		"tick": func(c Component) {
			c.(*Tick).Domains = []string{"payments", "reports"}
			c.(*Tick).Every = time.Second
		},
	}
	for _, cfg := range components() {
		t.Run(cfg.Section(), func(t *testing.T) {
			t.Parallel()
			want := reflect.New(reflect.TypeOf(cfg).Elem())
			want.Elem().Set(reflect.ValueOf(cfg).Elem())
			if f := notDefaults[cfg.Section()]; f != nil {
				f(want.Interface().(Component))
			}
			if err := Load("../tickflow.example.yaml", cfg, noEnv); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg, want.Interface()) {
				t.Fatalf("example file sets non-defaults:\n got %+v\nwant %+v", cfg, want.Interface())
			}
		})
	}
}

func TestLoadFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `
processor:
  domains: [payments]
  concurrency: 8
  work_timeout: 1m30s
  nats:
    url: nats://a:4222
  streams:
    storage: memory
worker:
  concurrency: 2
`)
	p := DefaultProcessor()
	if err := Load(path, &p, noEnv); err != nil {
		t.Fatal(err)
	}
	want := DefaultProcessor()
	want.Name = p.Name
	want.Domains = []string{"payments"}
	want.Concurrency = 8
	want.WorkTimeout = 90 * time.Second
	want.NATS.URL = "nats://a:4222"
	want.Streams.Storage = StorageMemory
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("Load =\n%+v\nwant\n%+v", p, want)
	}
}

func TestLoadFileReplacesLists(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "run:\n  domains: [a]\n")
	r := DefaultRun()
	if err := Load(path, &r, noEnv); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Domains, []string{"a"}) {
		t.Fatalf("domains = %v, want [a]", r.Domains)
	}
}

func TestLoadFileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
		want    []string // substrings of the message
	}{
		{
			name:    "unknown field in own section",
			content: "processor:\n  domains: [a]\n  concurency: 3\n",
			want:    []string{`tickflow.yaml: line 3: unknown key "concurency" in section processor`},
		},
		{
			name:    "unknown field in another section",
			content: "processor:\n  domains: [a]\nworker:\n  examples: true\n  exmaples: false\n",
			want:    []string{"line 5", "exmaples"},
		},
		{
			name:    "unknown nested field",
			content: "processor:\n  nats:\n    uri: nats://x\n",
			want:    []string{`line 3: unknown key "uri" in section nats`},
		},
		{
			name:    "unknown section",
			content: "processer:\n  domains: [a]\n",
			want:    []string{`line 1: unknown key "processer" in the top level`},
		},
		{
			name:    "wrong type",
			content: "processor:\n  concurrency: lots\n",
			want:    []string{"line 2", "lots"},
		},
		{
			name:    "bad duration",
			content: "processor:\n  work_timeout: soon\n",
			want:    []string{"line 2", "soon"},
		},
		{
			name:    "duration without unit",
			content: "processor:\n  work_timeout: 10\n",
			want:    []string{"line 2"},
		},
		{
			name:    "not yaml",
			content: "processor: [\n",
			want:    []string{"tickflow.yaml"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, tt.content)
			p := DefaultProcessor()
			err := Load(path, &p, noEnv)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Load = %v, want an error matching ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadEmptyFileAndPath(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"", writeFile(t, ""), writeFile(t, "# nothing\n")} {
		w := DefaultWorker()
		if err := Load(path, &w, noEnv); err != nil {
			t.Fatalf("Load(%q) = %v", path, err)
		}
		if want := DefaultWorker(); !reflect.DeepEqual(w, want) {
			t.Fatalf("Load(%q) changed the defaults: %+v", path, w)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	w := DefaultWorker()
	err := Load(filepath.Join(t.TempDir(), "nope.yaml"), &w, noEnv)
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrInvalid) {
		t.Fatalf("Load = %v, want fs.ErrNotExist and not ErrInvalid", err)
	}
}

func TestLoadEnv(t *testing.T) {
	t.Parallel()
	p := DefaultProcessor()
	err := Load("", &p, fakeEnv(map[string]string{
		"TICKFLOW_PROCESSOR_DOMAINS":                  " payments, reports ,",
		"TICKFLOW_PROCESSOR_CONCURRENCY":              "7",
		"TICKFLOW_PROCESSOR_WORK_TIMEOUT":             "250ms",
		"TICKFLOW_PROCESSOR_PROVISION":                "true",
		"TICKFLOW_PROCESSOR_NAME":                     "proc-a",
		"TICKFLOW_PROCESSOR_LOG_LEVEL":                "debug",
		"TICKFLOW_PROCESSOR_STREAMS_ACK_WAIT":         "1m",
		"TICKFLOW_PROCESSOR_STREAMS_REPLICAS":         "3",
		"TICKFLOW_PROCESSOR_STREAMS_FINISHED_MAX_AGE": "5s",
		"NATS_URL":                               "nats://from-standard:4222",
		"NATS_USER":                              "proc",
		"NATS_PASSWORD":                          "s3cret",
		"TICKFLOW_WORKER_CONCURRENCY":            "99", // another section's
		"TICKFLOW_PROCESSOR_STREAMS_DLQ_MAX_AGE": "",   // empty is unset
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultProcessor()
	want.Domains = []string{"payments", "reports"}
	want.Concurrency = 7
	want.WorkTimeout = 250 * time.Millisecond
	want.Provision = true
	want.Name = "proc-a"
	want.Log.Level = "debug"
	want.Streams.AckWait = time.Minute
	want.Streams.Replicas = 3
	want.Streams.FinishedMaxAge = 5 * time.Second
	want.NATS.URL = "nats://from-standard:4222"
	want.NATS.User = "proc"
	want.NATS.Password = "s3cret"
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("Load =\n%+v\nwant\n%+v", p, want)
	}
}

func TestLoadEnvTickflowNameBeatsNATSName(t *testing.T) {
	t.Parallel()
	w := DefaultWorker()
	err := Load("", &w, fakeEnv(map[string]string{
		"NATS_URL":                 "nats://standard:4222",
		"TICKFLOW_WORKER_NATS_URL": "nats://specific:4222",
		"NATS_CREDS":               "worker.creds",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if w.NATS.URL != "nats://specific:4222" || w.NATS.Creds != "worker.creds" {
		t.Fatalf("nats = %+v", w.NATS)
	}
}

func TestLoadEnvErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   Component
		env   map[string]string
		field string
		rule  string
	}{
		{name: "int", cfg: new(DefaultProcessor()),
			env:   map[string]string{"TICKFLOW_PROCESSOR_CONCURRENCY": "many"},
			field: "TICKFLOW_PROCESSOR_CONCURRENCY", rule: `"many" (processor.concurrency) is not an integer`},
		{name: "duration", cfg: new(DefaultTick()),
			env:   map[string]string{"TICKFLOW_TICK_EVERY": "10"},
			field: "TICKFLOW_TICK_EVERY", rule: "is not a duration"},
		{name: "bool", cfg: new(DefaultWorker()),
			env:   map[string]string{"TICKFLOW_WORKER_EXAMPLES": "yes please"},
			field: "TICKFLOW_WORKER_EXAMPLES", rule: "is not a boolean"},
		{name: "nested duration", cfg: new(DefaultAuthz()),
			env:   map[string]string{"TICKFLOW_AUTHZ_STREAMS_ACK_WAIT": "1 minute"},
			field: "TICKFLOW_AUTHZ_STREAMS_ACK_WAIT", rule: "(authz.streams.ack_wait) is not a duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Load("", tt.cfg, fakeEnv(tt.env))
			var fe *FieldError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) {
				t.Fatalf("Load = %v, want a *FieldError", err)
			}
			if fe.Field != tt.field || !strings.Contains(fe.Rule, tt.rule) {
				t.Fatalf("Load = %q, want field %s and rule containing %q", err, tt.field, tt.rule)
			}
		})
	}
}

// TestEnvReachesEveryField checks that every field of every config has a
// TICKFLOW_ variable that sets it, so a new field of an unsupported kind
// fails here rather than in production.
func TestEnvReachesEveryField(t *testing.T) {
	t.Parallel()
	for _, cfg := range components() {
		t.Run(cfg.Section(), func(t *testing.T) {
			t.Parallel()
			for _, f := range envFields(cfg.Section(), reflect.ValueOf(cfg)) {
				var s string
				switch {
				case f.v.Type() == durationType:
					s = "3s"
				case f.v.Kind() == reflect.Bool:
					s = strconv.FormatBool(!f.v.Bool())
				case f.v.Kind() == reflect.Int:
					s = "12345"
				default:
					s = "x,y"
				}
				before := reflect.ValueOf(f.v.Interface())
				if err := Load("", cfg, fakeEnv(map[string]string{f.name: s})); err != nil {
					t.Fatalf("%s=%s: %v", f.name, s, err)
				}
				if reflect.DeepEqual(before.Interface(), f.v.Interface()) {
					t.Fatalf("%s=%s did not change %s", f.name, s, f.path)
				}
				if want := "TICKFLOW_" + strings.ToUpper(strings.ReplaceAll(f.path, ".", "_")); f.name != want {
					t.Fatalf("variable %s, want %s", f.name, want)
				}
			}
		})
	}
}

func TestEnvVars(t *testing.T) {
	t.Parallel()
	vars := EnvVars(new(DefaultProcessor()))
	for _, want := range []string{
		"TICKFLOW_PROCESSOR_NATS_URL (or NATS_URL)  processor.nats.url",
		"TICKFLOW_PROCESSOR_NATS_PASSWORD (or NATS_PASSWORD)  processor.nats.password",
		"TICKFLOW_PROCESSOR_STREAMS_MAX_ACK_PENDING  processor.streams.max_ack_pending",
		"TICKFLOW_PROCESSOR_DOMAINS  processor.domains",
		"TICKFLOW_PROCESSOR_WORK_TIMEOUT  processor.work_timeout",
	} {
		if !slices.Contains(vars, want) {
			t.Errorf("EnvVars lacks %q:\n%s", want, strings.Join(vars, "\n"))
		}
	}
}

func TestParsePrecedence(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `
processor:
  domains: [from-file]
  concurrency: 2
  max_steps: 20
  work_timeout: 2s
  nats:
    url: nats://file:4222
`)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want func(*Processor)
	}{
		{
			name: "file over defaults",
			args: []string{"-config", path},
			want: func(p *Processor) {
				p.Domains, p.Concurrency, p.MaxSteps, p.WorkTimeout = []string{"from-file"}, 2, 20, 2*time.Second
				p.NATS.URL = "nats://file:4222"
			},
		},
		{
			name: "env over file",
			env: map[string]string{
				"TICKFLOW_PROCESSOR_CONCURRENCY": "3",
				"NATS_URL":                       "nats://env:4222",
			},
			args: []string{"-config", path},
			want: func(p *Processor) {
				p.Domains, p.Concurrency, p.MaxSteps, p.WorkTimeout = []string{"from-file"}, 3, 20, 2*time.Second
				p.NATS.URL = "nats://env:4222"
			},
		},
		{
			name: "flags over env",
			env: map[string]string{
				"TICKFLOW_CONFIG":                path,
				"TICKFLOW_PROCESSOR_CONCURRENCY": "3",
				"TICKFLOW_PROCESSOR_DOMAINS":     "from-env",
				"NATS_URL":                       "nats://env:4222",
			},
			args: []string{"-concurrency", "4", "-domain", "payments,reports", "-nats-url", "nats://flag:4222", "-provision"},
			want: func(p *Processor) {
				p.Domains, p.Concurrency, p.MaxSteps, p.WorkTimeout = []string{"payments", "reports"}, 4, 20, 2*time.Second
				p.NATS.URL = "nats://flag:4222"
				p.Provision = true
			},
		},
		{
			name: "flag equal to the default still wins",
			env:  map[string]string{"TICKFLOW_PROCESSOR_MAX_STEPS": "7"},
			args: []string{"-config", path, "-max-steps", "256"},
			want: func(p *Processor) {
				p.Domains, p.Concurrency, p.MaxSteps, p.WorkTimeout = []string{"from-file"}, 2, 256, 2*time.Second
				p.NATS.URL = "nats://file:4222"
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("processor", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			p := DefaultProcessor()
			if err := Parse(fs, tt.args, &p, fakeEnv(tt.env)); err != nil {
				t.Fatal(err)
			}
			want := DefaultProcessor()
			want.Name = p.Name
			tt.want(&want)
			if !reflect.DeepEqual(p, want) {
				t.Fatalf("Parse =\n%+v\nwant\n%+v", p, want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want error
	}{
		{name: "help", args: []string{"-h"}, want: flag.ErrHelp},
		{name: "invalid after flags", args: []string{"-concurrency", "0", "-domain", "a"}, want: ErrInvalid},
		{name: "no domains", args: nil, want: ErrInvalid},
		{name: "missing file", args: []string{"-config", "/nonexistent/tickflow.yaml", "-domain", "a"}, want: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("processor", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			p := DefaultProcessor()
			if err := Parse(fs, tt.args, &p, noEnv); !errors.Is(err, tt.want) {
				t.Fatalf("Parse = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestParseEveryComponent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   Component
		args  []string
		check func(Component) bool
	}{
		{name: "processor", cfg: new(DefaultProcessor()),
			args: []string{"-domain", "payments", "-nats-url", "nats://x:4222", "-work-timeout", "3s", "-log-format", "json"},
			check: func(c Component) bool {
				p := c.(*Processor)
				return p.WorkTimeout == 3*time.Second && p.Log.Format == "json"
			}},
		{name: "worker", cfg: new(DefaultWorker()),
			args: []string{"-concurrency", "5", "-examples", "-nats-creds", "w.creds"},
			check: func(c Component) bool {
				w := c.(*Worker)
				return w.Concurrency == 5 && w.Examples && w.NATS.Creds == "w.creds"
			}},
		{name: "tick", cfg: new(DefaultTick()),
			args:  []string{"-domain", "payments", "-cron", "*/5 * * * * *", "-steps", "4"},
			check: func(c Component) bool { t := c.(*Tick); return t.Cron == "*/5 * * * * *" && t.Steps == 4 }},
		{name: "authz", cfg: new(DefaultAuthz()),
			args: []string{"-owner", "boss", "-table", "t.yaml", "-domain", "a,b"},
			check: func(c Component) bool {
				a := c.(*Authz)
				return a.Owner == "boss" && a.Table == "t.yaml" && len(a.Domains) == 2
			}},
		{name: "run", cfg: new(DefaultRun()),
			args: []string{"-tick-every", "1s", "-demo=false", "-listen", "127.0.0.1:14222", "-data-dir", "/tmp/x"},
			check: func(c Component) bool {
				r := c.(*Run)
				return r.TickEvery == time.Second && !r.Demo && r.Embedded.Listen == "127.0.0.1:14222"
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet(tt.name, flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			if err := Parse(fs, tt.args, tt.cfg, noEnv); err != nil {
				t.Fatal(err)
			}
			if !tt.check(tt.cfg) {
				t.Fatalf("flags not applied: %+v", tt.cfg)
			}
		})
	}
}

// TestStepBoundsAndRecordWindow: processor.max_wait,
// processor.poison_retries and worker.record_window come from the file,
// the environment and the flags like every other key, in that order of
// precedence.
func TestStepBoundsAndRecordWindow(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "processor:\n  domains: [a]\n  max_wait: 5m\n  poison_retries: 3\nworker:\n  record_window: 2m\n")
	env := map[string]string{
		"TICKFLOW_PROCESSOR_MAX_WAIT":       "10m",
		"TICKFLOW_PROCESSOR_POISON_RETRIES": "4",
		"TICKFLOW_WORKER_RECORD_WINDOW":     "3m",
	}
	tests := []struct {
		name               string
		env                map[string]string
		procArgs, workArgs []string
		maxWait            time.Duration
		poison             int
		window             time.Duration
	}{
		{name: "defaults", procArgs: []string{"-domain", "a"},
			maxWait: time.Hour, poison: 12, window: 15 * time.Second},
		{name: "file", procArgs: []string{"-config", path}, workArgs: []string{"-config", path},
			maxWait: 5 * time.Minute, poison: 3, window: 2 * time.Minute},
		{name: "env over file", env: env, procArgs: []string{"-config", path}, workArgs: []string{"-config", path},
			maxWait: 10 * time.Minute, poison: 4, window: 3 * time.Minute},
		{name: "flags over env", env: env,
			procArgs: []string{"-config", path, "-max-wait", "20m", "-poison-retries", "5"},
			workArgs: []string{"-config", path, "-record-window", "4m"},
			maxWait:  20 * time.Minute, poison: 5, window: 4 * time.Minute},
	}
	parse := func(t *testing.T, cfg Component, args []string, env map[string]string) {
		t.Helper()
		fs := flag.NewFlagSet(cfg.Section(), flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		if err := Parse(fs, args, cfg, fakeEnv(env)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, w := DefaultProcessor(), DefaultWorker()
			parse(t, &p, tt.procArgs, tt.env)
			parse(t, &w, tt.workArgs, tt.env)
			if p.MaxWait != tt.maxWait || p.PoisonRetries != tt.poison || w.RecordWindow != tt.window {
				t.Fatalf("max_wait %s, poison_retries %d, record_window %s; want %s, %d, %s",
					p.MaxWait, p.PoisonRetries, w.RecordWindow, tt.maxWait, tt.poison, tt.window)
			}
		})
	}
}
