package config

// The environment is read by walking the config struct with reflect over its
// yaml tags, by hand rather than with envconfig or koanf: those name
// variables by their own tags or rules, so the names would drift from the
// file's keys, and neither knows the NATS_* aliases. The walk covers the
// five kinds of field the configs use (string, bool, int, time.Duration,
// []string) in a few dozen lines, and EnvVars lists every name it reads.

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix starts every tickflow environment variable.
const EnvPrefix = "TICKFLOW_"

var durationType = reflect.TypeFor[time.Duration]()

// envField is one field the environment can set.
type envField struct {
	name  string        // TICKFLOW_PROCESSOR_NATS_URL
	alias string        // NATS_URL, or ""
	path  string        // processor.nats.url
	v     reflect.Value // settable
}

// envFields lists the fields of the struct v points to, named under section.
func envFields(section string, v reflect.Value) []envField {
	var out []envField
	var walk func(name, path string, v reflect.Value)
	walk = func(name, path string, v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || key == "" || key == "-" {
				continue
			}
			fn, fp := name+"_"+strings.ToUpper(key), path+"."+key
			if f.Type.Kind() == reflect.Struct && f.Type != durationType {
				walk(fn, fp, v.Field(i))
				continue
			}
			out = append(out, envField{name: fn, alias: f.Tag.Get("env"), path: fp, v: v.Field(i)})
		}
	}
	walk(EnvPrefix+strings.ToUpper(section), section, v.Elem())
	return out
}

// applyEnv sets every field of cfg whose variable env returns non-empty,
// the TICKFLOW_ name winning over a NATS_* alias.
func applyEnv(section string, cfg any, env func(string) string) error {
	for _, f := range envFields(section, reflect.ValueOf(cfg)) {
		name, s := f.name, env(f.name)
		if s == "" && f.alias != "" {
			name, s = f.alias, env(f.alias)
		}
		if s == "" {
			continue
		}
		if err := setString(f.v, s); err != nil {
			return &FieldError{Field: name, Rule: fmt.Sprintf("%q (%s) %s", s, f.path, err)}
		}
	}
	return nil
}

// setString parses s into v by v's type.
func setString(v reflect.Value, s string) error {
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("is not a duration such as 30s or 1h30m")
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("is not an integer")
		}
		v.SetInt(int64(n))
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("is not a boolean (true or false)")
		}
		v.SetBool(b)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		v.Set(reflect.ValueOf(splitList(s)))
	default:
		// Reached only if a config gains a field of a new kind; the tests
		// walk every config so this cannot ship unnoticed.
		return fmt.Errorf("cannot be set from the environment (type %s)", v.Type())
	}
	return nil
}

// splitList splits a comma-separated list, trimming spaces and dropping
// empty items.
func splitList(s string) []string {
	out := []string{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// EnvVars returns the environment variables Load reads for cfg, in field
// order, each with the config file key it sets, e.g.
// "TICKFLOW_PROCESSOR_NATS_URL (or NATS_URL)  processor.nats.url". Commands
// print it in their usage text.
func EnvVars(cfg Component) []string {
	var out []string
	for _, f := range envFields(cfg.Section(), reflect.ValueOf(cfg)) {
		name := f.name
		if f.alias != "" {
			name += " (or " + f.alias + ")"
		}
		out = append(out, name+"  "+f.path)
	}
	return out
}
