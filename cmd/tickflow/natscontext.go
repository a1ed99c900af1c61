package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
)

// natsContext is a context of the nats command-line tool: one JSON file
// per name under <config>/nats/context/, the selected one named in
// <config>/nats/context.txt, where <config> is $XDG_CONFIG_HOME, else
// ~/.config. Only the settings tickflow connects with are read; unknown
// fields are ignored, as the nats tool ignores them.
type natsContext struct {
	// Name and Path say which context this is and where it was read.
	Name string `json:"-"`
	Path string `json:"-"`

	URL      string `json:"url"`
	User     string `json:"user"`
	Password string `json:"password"`
	Creds    string `json:"creds"`
	NKey     string `json:"nkey"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
	TLSFirst bool   `json:"tls_first"`
	// A context's inbox_prefix is not read: authz answers a user only
	// under its own prefix (_INBOX_<user>), which tickflow always takes.

	// Settings tickflow cannot connect with: a context that sets one is
	// refused rather than half used.
	Token            string `json:"token"`
	UserJWT          string `json:"user_jwt"`
	UserSeed         string `json:"user_seed"`
	NSC              string `json:"nsc"`
	SocksProxy       string `json:"socks_proxy"`
	WindowsCertStore string `json:"windows_cert_store"`
}

// configRoot is where the nats tool keeps its settings' folder "nats":
// $XDG_CONFIG_HOME, else ~/.config ($HOME, else the account's home).
func configRoot(getenv func(string) string) (string, error) {
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return x, nil
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config"), nil
	}
	u, err := user.Current()
	if err != nil || u.HomeDir == "" {
		return "", fmt.Errorf("%w: no home directory to find nats contexts in (set HOME or XDG_CONFIG_HOME): %v", errSettings, err)
	}
	return filepath.Join(u.HomeDir, ".config"), nil
}

// loadNATSContext reads the context name, or, when name is empty, the
// selected one; nil when none is named or selected. A name ending in .json
// that is an existing file is read from that path, as the nats tool does.
func loadNATSContext(name string, getenv func(string) string) (*natsContext, error) {
	if strings.HasSuffix(name, ".json") {
		if _, err := os.Stat(name); err == nil {
			return readNATSContext(strings.TrimSuffix(filepath.Base(name), ".json"), name, getenv)
		}
	}
	root, err := configRoot(getenv)
	if err != nil {
		if name == "" {
			return nil, nil // nothing selected where nothing can be
		}
		return nil, err
	}
	selected := ""
	if name == "" {
		sel := filepath.Join(root, "nats", "context.txt")
		b, err := os.ReadFile(sel)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: read the selected nats context: %w", errSettings, err)
		}
		if name = strings.TrimSpace(string(b)); name == "" {
			return nil, nil
		}
		selected = " (selected in " + sel + ")"
	}
	if name == "." || strings.Contains(name, "..") || strings.ContainsAny(name, `/\`) {
		return nil, fmt.Errorf("%w: nats context %q: expected a name without '..', '/' or '\\', or the path of a .json file", errSettings, name)
	}
	path := filepath.Join(root, "nats", "context", name+".json")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: unknown nats context %q%s: no file %s (nats context ls lists the contexts)", errSettings, name, selected, path)
	}
	return readNATSContext(name, path, getenv)
}

// readNATSContext reads the context file at path, expanding $VAR and ~ in
// its file paths as the nats tool does.
func readNATSContext(name, path string, getenv func(string) string) (*natsContext, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: nats context %q: %w", errSettings, name, err)
	}
	c := &natsContext{Name: name, Path: path}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("%w: nats context %q (%s): not a context's JSON: %w", errSettings, name, path, err)
	}
	var unsupported []string
	for _, f := range []struct{ name, v string }{
		{"token", c.Token}, {"user_jwt", c.UserJWT}, {"user_seed", c.UserSeed}, {"nsc", c.NSC},
		{"socks_proxy", c.SocksProxy}, {"windows_cert_store", c.WindowsCertStore},
	} {
		if f.v != "" {
			unsupported = append(unsupported, f.name)
		}
	}
	if len(unsupported) > 0 {
		return nil, fmt.Errorf("%w: nats context %q (%s) sets %s, which tickflow does not connect with: tickflow connects with a user and password, a creds file or an nkey seed file (and TLS files)",
			errSettings, name, path, strings.Join(unsupported, ", "))
	}
	for _, p := range []*string{&c.Creds, &c.NKey, &c.Cert, &c.Key, &c.CA} {
		*p = expandPath(*p, getenv)
	}
	return c, nil
}

// expandPath expands $VAR and a leading ~ in a path from a context, and
// takes the path out of a file:// reference.
func expandPath(p string, getenv func(string) string) string {
	p = strings.TrimPrefix(os.Expand(p, getenv), "file://")
	if strings.HasPrefix(p, "~") {
		if h := getenv("HOME"); h != "" {
			return h + p[1:]
		}
		if u, err := user.Current(); err == nil {
			return u.HomeDir + p[1:]
		}
	}
	return p
}

// resolveSecret reads a password given as a reference, as the nats tool
// does: env://NAME is the variable NAME, file://PATH the file's content
// (without its trailing newline); anything else is the password itself.
func resolveSecret(ref string, getenv func(string) string) (string, error) {
	scheme, rest, ok := strings.Cut(ref, "://")
	if !ok {
		return ref, nil
	}
	switch scheme {
	case "env":
		v := getenv(rest)
		if v == "" {
			return "", fmt.Errorf("%w: the password names the environment variable %s (env://%s), which is empty", errSettings, rest, rest)
		}
		return v, nil
	case "file":
		b, err := os.ReadFile(expandPath(rest, getenv))
		if err != nil {
			return "", fmt.Errorf("%w: the password names a file (file://): %w", errSettings, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	case "op", "nsc":
		return "", fmt.Errorf("%w: the password is a %s:// reference, which tickflow does not resolve: give the password itself, env://VARIABLE or file://PATH", errSettings, scheme)
	}
	return ref, nil
}
