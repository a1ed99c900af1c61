package config

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The configuration tables of docs/operations.md are checked against the
// defaults they document, so that a changed default fails here until the
// table says the same.

// operationsDoc is the document the tables are read from.
var operationsDoc = filepath.Join("..", "docs", "operations.md")

// docTable returns the body rows of the first markdown table after the line
// heading in path, each row's cells trimmed.
func docTable(t *testing.T, path, heading string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	start := -1
	for i, l := range lines {
		if l == heading {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s: no heading %q", path, heading)
	}
	var rows [][]string
	for _, l := range lines[start+1:] {
		if !strings.HasPrefix(l, "|") {
			if len(rows) > 0 {
				break
			}
			if strings.HasPrefix(l, "#") {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	if len(rows) < 3 {
		t.Fatalf("%s: no table after %q", path, heading)
	}
	return rows[2:] // the header and its separator
}

// unquote strips the backticks around a cell's code.
func unquote(s string) string { return strings.Trim(s, "`") }

// leadingValue is the value a default cell starts with: "128 steps at once"
// gives "128", "`ready`: take …" gives "ready", "1s: …" gives "1s", and
// "`a,b`: …" gives "a,b" (code is read whole, a list's commas included).
func leadingValue(cell string) string {
	if code, ok := strings.CutPrefix(cell, "`"); ok {
		s, _, _ := strings.Cut(code, "`")
		return s
	}
	s := cell
	if i := strings.IndexAny(s, "` :;(,"); i >= 0 {
		s = s[:i]
	}
	return s
}

// fieldByYAML returns the field of struct v whose yaml key is key.
func fieldByYAML(v reflect.Value, key string) (reflect.Value, bool) {
	for i := range v.NumField() {
		if name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ","); name == key {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// sameValue says whether doc, a value as the tables write it, is v. "none"
// is an empty list or string, and a list is written comma-separated;
// "<hostname>-<pid>" is this process's instance name.
func sameValue(v reflect.Value, doc string) error {
	switch x := v.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(doc)
		if err != nil || d != x {
			return fmt.Errorf("the doc says %q, the default is %s", doc, x)
		}
	case int:
		n, err := strconv.Atoi(doc)
		if err != nil || n != x {
			return fmt.Errorf("the doc says %q, the default is %d", doc, x)
		}
	case bool:
		b, err := strconv.ParseBool(doc)
		if err != nil || b != x {
			return fmt.Errorf("the doc says %q, the default is %t", doc, x)
		}
	case string:
		if doc == "none" && x == "" {
			return nil
		}
		want := strings.NewReplacer("<hostname>", hostname(), "<pid>", strconv.Itoa(os.Getpid())).Replace(doc)
		if want != x {
			return fmt.Errorf("the doc says %q, the default is %q", doc, x)
		}
	case []string:
		if doc == "none" && len(x) == 0 {
			return nil
		}
		if doc != strings.Join(x, ",") {
			return fmt.Errorf("the doc says %q, the default is %q", doc, x)
		}
	default:
		return fmt.Errorf("no comparison for a %T", x)
	}
	return nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "tickflow"
	}
	return h
}

// sameFlagDefault says whether doc is the default a flag shows, parsed as
// the field's type.
func sameFlagDefault(f *flag.Flag, field reflect.Value, doc string) error {
	shown := f.DefValue
	if field.Kind() == reflect.Slice {
		if shown == "" {
			shown = "none"
		}
		if shown != doc {
			return fmt.Errorf("the doc says %q, the flag's default is %q", doc, f.DefValue)
		}
		return nil
	}
	v := reflect.New(field.Type()).Elem()
	switch field.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(shown)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
	case int:
		n, err := strconv.Atoi(shown)
		if err != nil {
			return err
		}
		v.SetInt(int64(n))
	case bool:
		b, err := strconv.ParseBool(shown)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case string:
		v.SetString(shown)
	}
	if err := sameValue(v, doc); err != nil {
		return fmt.Errorf("flag -%s: %w", f.Name, err)
	}
	return nil
}

// TestOperationsDefaultsTables reads the flag tables of the processor,
// worker, authz, tick and run commands in docs/operations.md: each row's key is a field of the
// section, its environment variable is the one the loader reads, its flag
// is registered with the default the row states, and that default is the
// section's; and every field of the section but the connection, logging
// and provisioning sizes has a row.
func TestOperationsDefaultsTables(t *testing.T) {
	t.Parallel()
	p, w, a, tk, r := DefaultProcessor(), DefaultWorker(), DefaultAuthz(), DefaultTick(), DefaultRun()
	sections := []struct {
		name    string
		heading string
		cfg     any
		flags   func(*flag.FlagSet)
	}{
		{"processor", "### processor", &p, p.Flags},
		{"worker", "### worker", &w, w.Flags},
		{"authz", "### authz", &a, a.Flags},
		{"tick", "### tick", &tk, tk.Flags},
		{"run", "### run", &r, r.Flags},
	}
	// Documented elsewhere in operations.md: the connection, the log, the
	// embedded server (run's), and the streams table.
	elsewhere := map[string]bool{"nats": true, "log": true, "embedded": true}
	for _, s := range sections {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet(s.name, flag.ContinueOnError)
			s.flags(fs)
			v := reflect.ValueOf(s.cfg).Elem()
			rows := docTable(t, operationsDoc, s.heading)
			documented := map[string]bool{}
			for _, r := range rows {
				if len(r) != 4 {
					t.Errorf("row %q: want 4 cells (flag, key, environment, default), got %d", r, len(r))
					continue
				}
				key, env, def := unquote(r[1]), unquote(r[2]), r[3]
				if prefix, ok := strings.CutSuffix(key, ".*"); ok {
					documented[prefix] = true
					if want := "TICKFLOW_" + strings.ToUpper(s.name+"_"+prefix) + "_*"; env != want {
						t.Errorf("row %s: environment %s, want %s", key, env, want)
					}
					continue
				}
				documented[key] = true
				field, ok := fieldByYAML(v, key)
				if !ok {
					t.Errorf("row %s: no such key in the %s: section", key, s.name)
					continue
				}
				if want := "TICKFLOW_" + strings.ToUpper(s.name+"_"+key); env != want {
					t.Errorf("row %s: environment %s, want %s", key, env, want)
				}
				value := leadingValue(def)
				if err := sameValue(field, value); err != nil {
					t.Errorf("row %s: %v", key, err)
				}
				if r[0] == "—" {
					continue
				}
				name := strings.TrimPrefix(unquote(r[0]), "-")
				f := fs.Lookup(name)
				if f == nil {
					t.Errorf("row %s: the command has no flag -%s", key, name)
					continue
				}
				if err := sameFlagDefault(f, field, value); err != nil {
					t.Errorf("row %s: %v", key, err)
				}
			}
			for i := range v.NumField() {
				key, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
				if !documented[key] && !elsewhere[key] {
					t.Errorf("the %s: section's key %s has no row in the table under %q", s.name, key, s.heading)
				}
			}
		})
	}
}

// TestOperationsStreamsTable reads the streams: table of docs/operations.md:
// one row per key of Streams, each with its default.
func TestOperationsStreamsTable(t *testing.T) {
	t.Parallel()
	d := DefaultStreams()
	v := reflect.ValueOf(d)
	documented := map[string]bool{}
	for _, r := range docTable(t, operationsDoc, "### streams") {
		if len(r) != 3 {
			t.Errorf("row %q: want 3 cells (key, default, meaning), got %d", r, len(r))
			continue
		}
		key := unquote(r[0])
		documented[key] = true
		field, ok := fieldByYAML(v, key)
		if !ok {
			t.Errorf("row %s: no such key in the streams: section", key)
			continue
		}
		if err := sameValue(field, leadingValue(r[1])); err != nil {
			t.Errorf("row %s: %v", key, err)
		}
	}
	for i := range v.NumField() {
		key, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		if !documented[key] {
			t.Errorf("the streams: key %s has no row in the table", key)
		}
	}
}
