package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// fieldErrors flattens the joined errors Validate returns.
func fieldErrors(t *testing.T, err error) []*FieldError {
	t.Helper()
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*FieldError
		for _, e := range j.Unwrap() {
			out = append(out, fieldErrors(t, e)...)
		}
		return out
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *FieldError", err, err)
	}
	return []*FieldError{fe}
}

// validateCase is one rule: mutate breaks it (or not, when rule is "").
type validateCase[T any] struct {
	name   string
	mutate func(*T)
	field  string // the field named, relative to the type validated
	rule   string // substring of the rule; "" means valid
	cause  error  // also matched by errors.Is, if set
}

func runValidate[T any](t *testing.T, valid func() T, validate func(*T) error, tests []validateCase[T]) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid()
			tt.mutate(&cfg)
			err := validate(&cfg)
			if tt.rule == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate = %v, want an error matching ErrInvalid", err)
			}
			if tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Fatalf("Validate = %v, want an error matching %v", err, tt.cause)
			}
			fes := fieldErrors(t, err)
			if len(fes) != 1 {
				t.Fatalf("Validate = %d errors, want 1:\n%v", len(fes), err)
			}
			if fes[0].Field != tt.field || !strings.Contains(fes[0].Rule, tt.rule) {
				t.Fatalf("Validate = %q, want field %q and a rule containing %q", err, tt.field, tt.rule)
			}
			want := "config: "
			if tt.field != "" {
				want += tt.field + ": "
			}
			if !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("message %q does not start %q", err, want)
			}
		})
	}
}

func validProcessor() Processor {
	p := DefaultProcessor()
	p.Domains = []string{"payments", "reports"}
	return p
}

func TestProcessorValidate(t *testing.T) {
	t.Parallel()
	runValidate(t, validProcessor, (*Processor).Validate, []validateCase[Processor]{
		{name: "defaults plus a domain", mutate: func(*Processor) {}},
		{name: "no domains", mutate: func(p *Processor) { p.Domains = nil },
			field: "processor.domains", rule: "at least one domain"},
		{name: "domain with a dot", mutate: func(p *Processor) { p.Domains = []string{"payments", "a.b"} },
			field: "processor.domains[1]", rule: `"a.b" must not contain '.'`, cause: pipeline.ErrInvalid},
		{name: "domain with a wildcard", mutate: func(p *Processor) { p.Domains = []string{"a*"} },
			field: "processor.domains[0]", rule: "must not contain"},
		{name: "domain with a space", mutate: func(p *Processor) { p.Domains = []string{"a b"} },
			field: "processor.domains[0]", rule: "must not contain"},
		{name: "empty domain", mutate: func(p *Processor) { p.Domains = []string{""} },
			field: "processor.domains[0]", rule: "must not be empty"},
		{name: "repeated domain", mutate: func(p *Processor) { p.Domains = []string{"a", "b", "a"} },
			field: "processor.domains[2]", rule: `"a" repeats domains[0]`},
		{name: "empty name", mutate: func(p *Processor) { p.Name = "" },
			field: "processor.name", rule: "must not be empty"},
		{name: "max steps zero", mutate: func(p *Processor) { p.MaxSteps = 0 },
			field: "processor.max_steps", rule: "must be ≥ 1 (got 0)"},
		{name: "concurrency zero", mutate: func(p *Processor) { p.Concurrency = 0 },
			field: "processor.concurrency", rule: "must be ≥ 1 (got 0)"},
		{name: "work timeout below 1ms", mutate: func(p *Processor) { p.WorkTimeout = time.Microsecond },
			field: "processor.work_timeout", rule: "at least 1ms"},
		{name: "max wait below 1ms", mutate: func(p *Processor) { p.MaxWait = time.Microsecond },
			field: "processor.max_wait", rule: "must be at least 1ms (got 1µs)"},
		{name: "max wait below work timeout", mutate: func(p *Processor) { p.MaxWait = time.Second }},
		{name: "poison retries zero", mutate: func(p *Processor) { p.PoisonRetries = 0 },
			field: "processor.poison_retries", rule: "must be ≥ 1 (got 0)"},
		{name: "poison retries one", mutate: func(p *Processor) { p.PoisonRetries = 1 }},
		{name: "tick pace", mutate: func(p *Processor) { p.Pace = "tick" }},
		{name: "unknown pace", mutate: func(p *Processor) { p.Pace = "fast" },
			field: "processor.pace", rule: `must be "ready" or "tick" (got "fast")`},
		{name: "idle wait below 1ms", mutate: func(p *Processor) { p.IdleWait = time.Microsecond },
			field: "processor.idle_wait", rule: "must be at least 1ms (got 1µs)"},
		{name: "throttle", mutate: func(p *Processor) { p.Throttle = 200 }},
		{name: "negative throttle", mutate: func(p *Processor) { p.Throttle = -1 },
			field: "processor.throttle", rule: "must be ≥ 0 steps per second, 0 for none (got -1)"},
		{name: "nats rules apply", mutate: func(p *Processor) { p.NATS.URL = "http://x" },
			field: "processor.nats.url", rule: "nats://"},
		{name: "log rules apply", mutate: func(p *Processor) { p.Log.Level = "loud" },
			field: "processor.log.level", rule: `"loud"`, cause: logging.ErrLevel},
		{name: "streams rules apply", mutate: func(p *Processor) { p.Streams.Replicas = 0 },
			field: "processor.streams", rule: "replicas must be 1 to 5", cause: streams.ErrSettings},
	})
}

func TestNATSValidate(t *testing.T) {
	t.Parallel()
	runValidate(t, DefaultNATS, func(n *NATS) error { return n.Validate() }, []validateCase[NATS]{
		{name: "empty is anonymous to the default", mutate: func(*NATS) {}},
		{name: "nats url", mutate: func(n *NATS) { n.URL = "nats://10.0.0.1:4222" }},
		{name: "tls url", mutate: func(n *NATS) { n.URL = "tls://nats.example.com:4222" }},
		{name: "websocket urls", mutate: func(n *NATS) { n.URL = "ws://a:8080, wss://b:443" }},
		{name: "user and password", mutate: func(n *NATS) { n.User, n.Password = "proc", "s3cret" }},
		{name: "user alone (token-less)", mutate: func(n *NATS) { n.User = "proc" }},
		{name: "creds alone", mutate: func(n *NATS) { n.Creds = "proc.creds" }},
		{name: "nkey alone", mutate: func(n *NATS) { n.NKey = "proc.nk" }},
		{name: "http scheme", mutate: func(n *NATS) { n.URL = "http://localhost:4222" },
			field: "url", rule: "must start with nats://, tls://, ws:// or wss://"},
		{name: "bare host", mutate: func(n *NATS) { n.URL = "localhost:4222" },
			field: "url", rule: "must start with"},
		{name: "one bad server of several", mutate: func(n *NATS) { n.URL = "nats://a:4222,b:4222" },
			field: "url", rule: `"b:4222"`},
		{name: "no host", mutate: func(n *NATS) { n.URL = "nats://" },
			field: "url", rule: "has no host"},
		{name: "password without user", mutate: func(n *NATS) { n.Password = "s3cret" },
			field: "password", rule: "needs a user"},
		{name: "user and creds", mutate: func(n *NATS) { n.User, n.Creds = "proc", "proc.creds" },
			field: "creds", rule: "must not be set together with user"},
		{name: "user and nkey", mutate: func(n *NATS) { n.User, n.NKey = "proc", "proc.nk" },
			field: "nkey", rule: "must not be set together with user"},
		{name: "creds and nkey", mutate: func(n *NATS) { n.Creds, n.NKey = "proc.creds", "proc.nk" },
			field: "nkey", rule: "must not be set together with creds"},
	})
}

func TestEmbeddedValidate(t *testing.T) {
	t.Parallel()
	enabled := func() Embedded { e := DefaultEmbedded(); e.Enabled = true; return e }
	runValidate(t, enabled, func(e *Embedded) error { return e.Validate() }, []validateCase[Embedded]{
		{name: "defaults enabled", mutate: func(*Embedded) {}},
		{name: "disabled is not checked", mutate: func(e *Embedded) { e.Enabled, e.Listen = false, "" }},
		{name: "ipv6 listen", mutate: func(e *Embedded) { e.Listen = "[::1]:4222" }},
		{name: "all interfaces", mutate: func(e *Embedded) { e.Listen = ":4222" }},
		{name: "no config file", mutate: func(e *Embedded) { e.ConfigFile = "" },
			field: "config_file", rule: "must not be empty"},
		{name: "no data dir", mutate: func(e *Embedded) { e.DataDir = "" },
			field: "data_dir", rule: "must not be empty"},
		{name: "listen without port", mutate: func(e *Embedded) { e.Listen = "127.0.0.1" },
			field: "listen", rule: "must be host:port"},
		{name: "listen port zero", mutate: func(e *Embedded) { e.Listen = "127.0.0.1:0" },
			field: "listen", rule: "port from 1 to 65535"},
		{name: "listen port too big", mutate: func(e *Embedded) { e.Listen = "127.0.0.1:70000" },
			field: "listen", rule: "port from 1 to 65535"},
	})
}

func TestStreamsValidate(t *testing.T) {
	t.Parallel()
	runValidate(t, DefaultStreams, func(s *Streams) error { return s.Validate() }, []validateCase[Streams]{
		{name: "defaults", mutate: func(*Streams) {}},
		{name: "memory", mutate: func(s *Streams) { s.Storage = StorageMemory }},
		{name: "cluster", mutate: func(s *Streams) { s.Replicas = 3 }},
		{name: "unknown storage", mutate: func(s *Streams) { s.Storage = "disk" },
			field: "storage", rule: `"disk" must be "file" or "memory"`},
		{name: "too many replicas", mutate: func(s *Streams) { s.Replicas = 6 },
			field: "", rule: "replicas must be 1 to 5 (got 6)", cause: streams.ErrSettings},
		{name: "no duplicate window", mutate: func(s *Streams) { s.DuplicateWindow = 0 },
			field: "", rule: "duplicate window must be positive", cause: streams.ErrSettings},
		{name: "callbacks kept shorter than the window", mutate: func(s *Streams) { s.CallbackMaxAge = time.Minute },
			field: "", rule: "callback max age", cause: streams.ErrSettings},
		{name: "no dlq age", mutate: func(s *Streams) { s.DLQMaxAge = 0 },
			field: "", rule: "dlq max age", cause: streams.ErrSettings},
		{name: "dead letters kept shorter than the window", mutate: func(s *Streams) { s.DLQMaxAge = time.Minute },
			field: "", rule: "dlq max age must be ≥ the duplicate window 2m0s (got 1m0s)", cause: streams.ErrSettings},
		{name: "finished batches kept 1s", mutate: func(s *Streams) { s.FinishedMaxAge = time.Second }},
		{name: "finished batches kept under 1s", mutate: func(s *Streams) { s.FinishedMaxAge = 500 * time.Millisecond },
			field: "", rule: "finished max age must be at least 1s (got 500ms)", cause: streams.ErrSettings},
		{name: "ack wait below 1s", mutate: func(s *Streams) { s.AckWait = time.Millisecond },
			field: "", rule: "ack wait must be at least 1s", cause: streams.ErrSettings},
		{name: "max ack pending zero", mutate: func(s *Streams) { s.MaxAckPending = 0 },
			field: "", rule: "max ack pending", cause: streams.ErrSettings},
	})
}

func TestStreamsSettings(t *testing.T) {
	t.Parallel()
	if got, want := DefaultStreams().Settings(), streams.DefaultSettings(); got != want {
		t.Fatalf("DefaultStreams().Settings() = %+v, want streams.DefaultSettings() %+v", got, want)
	}
	s := DefaultStreams()
	s.Storage = StorageMemory
	if !s.Settings().Memory {
		t.Fatal(`storage "memory" did not set Settings().Memory`)
	}
}

func TestLogValidate(t *testing.T) {
	t.Parallel()
	runValidate(t, DefaultLog, func(l *Log) error { return l.Validate() }, []validateCase[Log]{
		{name: "defaults", mutate: func(*Log) {}},
		{name: "json debug", mutate: func(l *Log) { l.Format, l.Level = "json", "debug" }},
		{name: "text error", mutate: func(l *Log) { l.Format, l.Level = "text", "error" }},
		{name: "unknown format", mutate: func(l *Log) { l.Format = "xml" },
			field: "format", rule: `"xml": must be "auto", "text" or "json"`, cause: logging.ErrFormat},
		{name: "unknown level", mutate: func(l *Log) { l.Level = "trace" },
			field: "level", rule: `"trace": must be "debug"`, cause: logging.ErrLevel},
	})
}

func TestWorkerValidate(t *testing.T) {
	t.Parallel()
	runValidate(t, DefaultWorker, (*Worker).Validate, []validateCase[Worker]{
		{name: "defaults", mutate: func(*Worker) {}},
		{name: "empty name", mutate: func(w *Worker) { w.Name = "" },
			field: "worker.name", rule: "must not be empty"},
		{name: "concurrency zero", mutate: func(w *Worker) { w.Concurrency = 0 },
			field: "worker.concurrency", rule: "must be ≥ 1 (got 0)"},
		{name: "record window zero", mutate: func(w *Worker) { w.RecordWindow = 0 },
			field: "worker.record_window", rule: "must be at least 1ms (got 0s)"},
		{name: "record window 1ms", mutate: func(w *Worker) { w.RecordWindow = time.Millisecond }},
		{name: "nats rules apply", mutate: func(w *Worker) { w.NATS.Password = "x" },
			field: "worker.nats.password", rule: "needs a user"},
		{name: "log rules apply", mutate: func(w *Worker) { w.Log.Format = "yaml" },
			field: "worker.log.format", rule: `"yaml"`},
	})
}

func validTick() Tick {
	t := DefaultTick()
	t.Domains = []string{"payments"}
	t.Every = time.Second
	return t
}

func TestTickValidate(t *testing.T) {
	t.Parallel()
	runValidate(t, validTick, (*Tick).Validate, []validateCase[Tick]{
		{name: "every", mutate: func(*Tick) {}},
		{name: "every 1ms", mutate: func(t *Tick) { t.Every = time.Millisecond }},
		{name: "cron", mutate: func(t *Tick) { t.Every, t.Cron = 0, "*/10 * * * * *" }},
		{name: "once", mutate: func(t *Tick) { t.Every, t.Once = 0, true }},
		{name: "many steps", mutate: func(t *Tick) { t.Steps = 100 }},
		{name: "no domains", mutate: func(t *Tick) { t.Domains = nil },
			field: "tick.domains", rule: "at least one domain"},
		{name: "bad domain", mutate: func(t *Tick) { t.Domains = []string{"pay>"} },
			field: "tick.domains[0]", rule: "must not contain"},
		{name: "no schedule", mutate: func(t *Tick) { t.Every = 0 },
			field: "tick.every", rule: "one of every, cron or once must be set"},
		{name: "every and cron", mutate: func(t *Tick) { t.Cron = "* * * * * *" },
			field: "tick.cron", rule: "must not be set together with every"},
		{name: "every and once", mutate: func(t *Tick) { t.Once = true },
			field: "tick.once", rule: "must not be set together with every"},
		{name: "cron and once", mutate: func(t *Tick) { t.Every, t.Cron, t.Once = 0, "* * * * * *", true },
			field: "tick.once", rule: "must not be set together with cron"},
		{name: "every below 1ms", mutate: func(t *Tick) { t.Every = time.Microsecond },
			field: "tick.every", rule: "at least 1ms"},
		{name: "negative every", mutate: func(t *Tick) { t.Every = -time.Second },
			field: "tick.every", rule: "at least 1ms"},
		{name: "five-field cron", mutate: func(t *Tick) { t.Every, t.Cron = 0, "*/5 * * * *" },
			field: "tick.cron", rule: "six fields, seconds first"},
		{name: "cron descriptor", mutate: func(t *Tick) { t.Every, t.Cron = 0, "@hourly" },
			field: "tick.cron", rule: "six fields"},
		{name: "cron out of range", mutate: func(t *Tick) { t.Every, t.Cron = 0, "61 * * * * *" },
			field: "tick.cron", rule: "six fields"},
		{name: "steps zero", mutate: func(t *Tick) { t.Steps = 0 },
			field: "tick.steps", rule: "must be ≥ 1 (got 0)"},
	})
}

func TestAuthzValidate(t *testing.T) {
	t.Parallel()
	runValidate(t, DefaultAuthz, (*Authz).Validate, []validateCase[Authz]{
		{name: "defaults", mutate: func(*Authz) {}},
		{name: "with domains", mutate: func(a *Authz) { a.Domains = []string{"payments", "reports"} }},
		{name: "bad domain", mutate: func(a *Authz) { a.Domains = []string{"ok", "x.y"} },
			field: "authz.domains[1]", rule: "must not contain '.'"},
		{name: "empty owner", mutate: func(a *Authz) { a.Owner = "" },
			field: "authz.owner", rule: "must not be empty"},
		{name: "owner not a subject token", mutate: func(a *Authz) { a.Owner = "ops.team" },
			field: "authz.owner", rule: "must not contain '.'"},
		{name: "no table", mutate: func(a *Authz) { a.Table = "" },
			field: "authz.table", rule: "must name the authorization table file"},
		{name: "streams rules apply", mutate: func(a *Authz) { a.Streams.Storage = "tape" },
			field: "authz.streams.storage", rule: `"tape"`},
	})
}

func TestRunValidate(t *testing.T) {
	t.Parallel()
	runValidate(t, DefaultRun, (*Run).Validate, []validateCase[Run]{
		{name: "defaults", mutate: func(*Run) {}},
		{name: "memory storage", mutate: func(r *Run) { r.Streams.Storage = StorageMemory }},
		{name: "no domains", mutate: func(r *Run) { r.Domains = []string{} },
			field: "run.domains", rule: "at least one domain"},
		{name: "bad domain", mutate: func(r *Run) { r.Domains = []string{"a b"} },
			field: "run.domains[0]", rule: "must not contain"},
		{name: "embedded disabled", mutate: func(r *Run) { r.Embedded.Enabled = false },
			field: "run.embedded.enabled", rule: "must be true"},
		{name: "embedded rules apply", mutate: func(r *Run) { r.Embedded.Listen = "nowhere" },
			field: "run.embedded.listen", rule: "host:port"},
		{name: "tick every zero", mutate: func(r *Run) { r.TickEvery = 0 },
			field: "run.tick_every", rule: "at least 1ms (got 0s)"},
	})
}

func TestValidateReportsEveryRule(t *testing.T) {
	t.Parallel()
	p := DefaultProcessor()
	p.Concurrency, p.MaxSteps = 0, 0
	fes := fieldErrors(t, p.Validate())
	var fields []string
	for _, fe := range fes {
		fields = append(fields, fe.Field)
	}
	if got, want := strings.Join(fields, " "), "processor.domains processor.max_steps processor.concurrency"; got != want {
		t.Fatalf("fields = %q, want %q", got, want)
	}
}

func TestSendersValidate(t *testing.T) {
	t.Parallel()
	runValidate(t, validProcessor, (*Processor).Validate, []validateCase[Processor]{
		{name: "names", mutate: func(p *Processor) { p.Senders = []string{"chain/s1", "chain/s2", "other/s1"} }},
		{name: "no domain", mutate: func(p *Processor) { p.Senders = []string{"s1"} },
			field: "processor.senders[0]", rule: "expected <domain>/<name>"},
		{name: "a secret in the processor", mutate: func(p *Processor) { p.Senders = []string{"chain/s1=env:K"} },
			field: "processor.senders[0]", rule: "secret references belong in the worker section"},
		{name: "repeated", mutate: func(p *Processor) { p.Senders = []string{"chain/s1", "chain/s1"} },
			field: "processor.senders[1]", rule: "chain/s1 repeats senders[0]"},
		{name: "share", mutate: func(p *Processor) { p.SenderShare = 1 }},
		{name: "negative share", mutate: func(p *Processor) { p.SenderShare = -1 },
			field: "processor.sender_share", rule: "must be ≥ 0"},
	})
	runValidate(t, DefaultWorker, (*Worker).Validate, []validateCase[Worker]{
		{name: "references", mutate: func(w *Worker) { w.Senders = []string{"chain/s1=env:S1_KEY", "chain/s2=file:/run/secrets/s2"} }},
		{name: "no reference", mutate: func(w *Worker) { w.Senders = []string{"chain/s1"} },
			field: "worker.senders[0]", rule: "expected <domain>/<name>=<env:NAME or file:/path>"},
		{name: "bad reference", mutate: func(w *Worker) { w.Senders = []string{"chain/s1=vault:x"} },
			field: "worker.senders[0]", rule: "expected env:NAME or file:/path"},
		{name: "bad name", mutate: func(w *Worker) { w.Senders = []string{"chain/s.1=env:K"} },
			field: "worker.senders[0]", rule: "sender name"},
	})
}
