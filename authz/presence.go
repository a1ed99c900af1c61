package authz

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
)

// presenceWait bounds the read of the presence bucket.
const presenceWait = 5 * time.Second

// Unserved reads which processors and workers run (their presence records)
// and returns a warning for each label of the table in force whose domain
// no processor serves, and for each function type the table allows that no
// worker serves, sorted. Batches of either would wait in their queue with
// nothing to say why. A presence bucket that cannot be read gives one
// warning saying so, not an error: the table is in force either way.
func (s *Service) Unserved(ctx context.Context) []string {
	live, err := s.live(ctx)
	if err != nil {
		return []string{fmt.Sprintf("cannot tell which domains and function types are served: %v", err)}
	}
	return unserved(s.Table(), live)
}

// live reads every presence record, oldest start first.
func (s *Service) live(ctx context.Context) ([]streams.Presence, error) {
	ctx, cancel := context.WithTimeout(ctx, presenceWait)
	defer cancel()
	kv, err := s.js.KeyValue(ctx, streams.BucketPresence)
	if err != nil {
		return nil, err
	}
	return streams.ListPresence(ctx, kv)
}

// presence answers which processors and workers run: one read of the
// presence bucket, whose records expire streams.PresenceTTL after a
// process stops refreshing them.
func (s *Service) presence(ctx context.Context, _ string, _ *struct{}) (any, error) {
	live, err := s.live(ctx)
	if err != nil {
		return nil, errf(api.CodeUnavailable, "authz: cannot read which processors and workers run: %v", err)
	}
	out := &api.PresenceReply{Processors: []api.Presence{}, Workers: []api.Presence{}, Unserved: unserved(s.Table(), live)}
	for _, p := range live {
		v := api.Presence{Name: p.Name, Kind: p.Kind, Domains: p.Domains, Types: p.Types, Since: p.Since, At: p.At}
		if p.Kind == streams.PresenceProcessor {
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
func unserved(t *Table, live []streams.Presence) []string {
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
	warnings := s.Unserved(ctx)
	for _, w := range warnings {
		s.log.Warn("nothing running serves part of the table", "warning", w, "when", when)
	}
	return warnings
}

// warnAtStart logs Unserved's warnings once the processes started beside
// authz have had one refresh to write their presence, unless ctx ends first.
func (s *Service) warnAtStart(ctx context.Context) {
	t := time.NewTimer(streams.PresenceRefresh)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
		s.WarnUnserved(ctx, "start")
	}
}
