package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// table writes rows aligned in columns, as people read them.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(anys(header)...)
	}
	return t
}

// row writes one row; a cell is printed with %v, a tab or newline in it
// replaced by a space so it stays in its column.
func (t *table) row(cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(fmt.Sprint(c))
	}
	fmt.Fprintln(t.tw, strings.Join(s, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printJSONLine writes v as JSON on one line.
func printJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// output prints v as JSON with --json, else calls human.
func output(g *Globals, env *Env, v any, human func(w io.Writer) error) error {
	if g.JSON {
		return printJSON(env.Stdout, v)
	}
	return human(env.Stdout)
}

// ago says how long before now t was, for a person: 4s, 3m12s, 2h5m, 3d4h;
// "-" for the zero time.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return short(now.Sub(t))
}

// short writes a duration to the second, or to the millisecond under one.
func short(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + short(-d)
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	days := d / (24 * time.Hour)
	return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
}

// orDash is s, or "-" for nothing.
func orDash[T comparable](v T) any {
	var zero T
	if v == zero {
		return "-"
	}
	return v
}

// stamp writes a time for a person: UTC to the second.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
