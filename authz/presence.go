package authz

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
)

// presenceWait bounds the read of the presence bucket.
const presenceWait = 5 * time.Second

// presenceWatch reads which processors and workers run, and compares
// them with the table in force.
type presenceWatch struct {
	js    jetstream.JetStream
	table func() *Table
	log   *slog.Logger
}

// Unserved reads which processors and workers run (their presence records)
// and returns a warning for each label of the table in force whose domain
// no processor serves, and for each function type the table allows that no
// worker serves, sorted. Batches of either would wait in their queue with
// nothing to say why. A presence bucket that cannot be read gives one
// warning saying so, not an error: the table is in force either way.
func (s *Service) Unserved(ctx context.Context) []string { return s.presence.unserved(ctx) }

// unserved is Service.Unserved.
func (pw *presenceWatch) unserved(ctx context.Context) []string {
	live, err := pw.live(ctx)
	if err != nil {
		return []string{fmt.Sprintf("cannot tell which domains and function types are served: %v", err)}
	}
	return unserved(pw.table(), live)
}

// live reads every presence record, oldest start first.
func (pw *presenceWatch) live(ctx context.Context) ([]records.Presence, error) {
	ctx, cancel := context.WithTimeout(ctx, presenceWait)
	defer cancel()
	kv, err := pw.js.KeyValue(ctx, streams.BucketPresence)
	if err != nil {
		return nil, err
	}
	return streams.ListPresence(ctx, kv)
}

// list answers which processors and workers run: one read of the
// presence bucket, whose records expire streams.PresenceTTL after a
// process stops refreshing them.
func (pw *presenceWatch) list(ctx context.Context, _ string, _ *struct{}) (any, error) {
	live, err := pw.live(ctx)
	if err != nil {
		return nil, errf(api.CodeUnavailable, "authz: cannot read which processors and workers run: %v", err)
	}
	out := &api.PresenceReply{Processors: []api.Presence{}, Workers: []api.Presence{}, Unserved: unserved(pw.table(), live)}
	for _, p := range live {
		v := api.Presence{Name: p.Name, Kind: p.Kind, Domains: p.Domains, Types: p.Types, Since: p.Since, At: p.At}
		if p.Kind == records.PresenceProcessor {
			out.Processors = append(out.Processors, v)
		} else {
			out.Workers = append(out.Workers, v)
		}
	}
	if out.Unserved == nil {
		out.Unserved = []string{}
	}
	return out, nil
}

// unserved compares table t with the live presence records.
func unserved(t *Table, live []records.Presence) []string {
	domains, types := map[string]bool{}, map[string]bool{}
	for _, p := range live {
		for _, d := range p.Domains {
			domains[d] = true
		}
		for _, typ := range p.Types {
			types[typ] = true
		}
	}
	var out []string
	byType := map[string][]string{}
	for name, l := range t.Labels {
		if !domains[l.Domain] {
			out = append(out, fmt.Sprintf("label %s: no running processor serves its domain %s; its batches wait until one does", name, l.Domain))
		}
		for typ := range l.Functions {
			if !types[typ] {
				byType[typ] = append(byType[typ], name)
			}
		}
	}
	for typ, labels := range byType {
		slices.Sort(labels)
		out = append(out, fmt.Sprintf("function type %s (labels %s): no running worker serves it; its batches wait until one does", typ, strings.Join(labels, ", ")))
	}
	slices.Sort(out)
	return out
}

// WarnUnserved logs each warning of Unserved at Warn, saying when (start,
// reload) it looked, and returns them.
func (s *Service) WarnUnserved(ctx context.Context, when string) []string {
	return s.presence.warn(ctx, when)
}

// warn is Service.WarnUnserved.
func (pw *presenceWatch) warn(ctx context.Context, when string) []string {
	warnings := pw.unserved(ctx)
	for _, w := range warnings {
		pw.log.Warn("nothing running serves part of the table", "warning", w, "when", when)
	}
	return warnings
}

// warnAtStart logs Unserved's warnings once the processes started beside
// authz have had one refresh to write their presence, unless ctx ends first.
func (pw *presenceWatch) warnAtStart(ctx context.Context) {
	t := time.NewTimer(streams.PresenceRefresh)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
		pw.warn(ctx, "start")
	}
}
