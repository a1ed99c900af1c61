package authz

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// TestPresenceWatch: with nothing running, every label's domain and every
// function type is unserved; once a processor and a worker write their
// presence, only what they do not serve is. The kind is the key's: a
// worker's record that names a domain serves none, and a record that does
// not decode is passed over. The listing shows processors and workers
// apart, oldest start first; warn logs each warning with when it looked.
// A presence bucket that cannot be read is one warning, and a 503 for the
// listing.
func TestPresenceWatch(t *testing.T) {
	p := newParts(t)
	logs := &testnats.LogBuffer{}
	pw := &presenceWatch{js: p.js, table: p.Table, log: slog.New(slog.NewJSONHandler(logs, nil))}
	noProcessor := func(label, domain string) string {
		return "label " + label + ": no running processor serves its domain " + domain + "; its batches wait until one does"
	}
	noWorker := "function type noop (labels jobs, limited, parcels): no running worker serves it; its batches wait until one does"
	if got, want := pw.unserved(p.ctx), []string{noWorker, noProcessor("jobs", "pay"), noProcessor("limited", "pay"), noProcessor("parcels", "ship")}; !slices.Equal(got, want) {
		t.Fatalf("with nothing running: %q, want %q", got, want)
	}

	kv, err := p.admin.KeyValue(p.ctx, streams.BucketPresence)
	if err != nil {
		t.Fatal(err)
	}
	since := p.clock.Now().Truncate(time.Second)
	put := func(key string, rec records.Presence) {
		t.Helper()
		data, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(p.ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	put(streams.ProcessorPresenceKey("pay", "proc", "i1"), records.Presence{Name: "proc", Domains: []string{"pay"}, Types: []string{"other"}, Since: since.Add(time.Second), At: since})
	put(streams.WorkerPresenceKey("work", "i1"), records.Presence{Name: "work", Types: []string{"noop"}, Since: since, At: since})
	put(streams.WorkerPresenceKey("liar", "i1"), records.Presence{Name: "liar", Domains: []string{"ship"}, Since: since.Add(2 * time.Second), At: since})
	if _, err := kv.Put(p.ctx, streams.WorkerPresenceKey("broken", "i1"), []byte("garbage")); err != nil {
		t.Fatal(err)
	}

	out, err := pw.list(p.ctx, DefaultOwner, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep := out.(*api.PresenceReply)
	want := &api.PresenceReply{
		Processors: []api.Presence{{Name: "proc", Kind: records.PresenceProcessor, Domains: []string{"pay"}, Since: since.Add(time.Second), At: since}},
		Workers: []api.Presence{{Name: "work", Kind: records.PresenceWorker, Types: []string{"noop"}, Since: since, At: since},
			{Name: "liar", Kind: records.PresenceWorker, Since: since.Add(2 * time.Second), At: since}},
		Unserved: []string{noProcessor("parcels", "ship")},
	}
	got, _ := json.Marshal(rep)
	if w, _ := json.Marshal(want); string(got) != string(w) {
		t.Fatalf("presence\n%s\nwant\n%s", got, w)
	}

	if warned := pw.warn(p.ctx, "reload"); !slices.Equal(warned, want.Unserved) {
		t.Fatalf("warn: %q, want %q", warned, want.Unserved)
	}
	recs := logs.Records(t)
	if len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["warning"] != want.Unserved[0] || recs[0]["when"] != "reload" {
		t.Fatalf("logged %v, want the one warning, at reload", recs)
	}
	// At start, the warnings wait for a refresh; a stop before says nothing.
	stopped, stop := context.WithCancel(p.ctx)
	stop()
	pw.warnAtStart(stopped)
	if n := len(logs.Records(t)); n != 1 {
		t.Fatalf("%d log records after a start cut short, want still 1", n)
	}

	if err := p.admin.DeleteKeyValue(p.ctx, streams.BucketPresence); err != nil {
		t.Fatal(err)
	}
	if got := pw.unserved(p.ctx); len(got) != 1 || !strings.HasPrefix(got[0], "cannot tell which domains and function types are served: ") {
		t.Fatalf("without a presence bucket: %q, want one warning saying so", got)
	}
	if _, err := pw.list(p.ctx, DefaultOwner, nil); codeOf(err) != api.CodeUnavailable {
		t.Fatalf("listing without a presence bucket: %v, want a 503", err)
	}
}
