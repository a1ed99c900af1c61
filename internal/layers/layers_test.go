package layers_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/tickflow/tickflow"

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// list runs go list -deps -json over the module's packages (tests
// excluded: a test may use anything) and returns each package of the
// module with its transitive dependencies.
func list(t *testing.T) []pkg {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go command is not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-json=ImportPath,Imports,Deps", module+"/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages of %s: not the module", len(pkgs), module)
	}
	return pkgs
}

// under reports whether path is the module's package rel or below it.
func under(path, rel string) bool {
	p := module + "/" + rel
	return path == p || strings.HasPrefix(path, p+"/")
}

// outsideCore are the trees that may wire the examples and the step
// pipeline in: the composition roots, the examples themselves, and the
// harnesses.
var outsideCore = []string{"cmd", "internal/system", "examples", "x", "chaos", "internal/layers"}

func TestCoreImportsNoExamplesNorStepPipeline(t *testing.T) {
	checked := 0
	for _, p := range list(t) {
		if slices.ContainsFunc(outsideCore, func(rel string) bool { return under(p.ImportPath, rel) }) {
			continue
		}
		checked++
		for _, d := range p.Deps {
			if under(d, "examples") || under(d, "x") || under(d, "internal/system") || under(d, "cmd") {
				t.Errorf("%s depends on %s: the core must not import the examples, the step pipeline or a composition root (CONTRIBUTING.md, where things go)", p.ImportPath, d)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package of the core was checked")
	}
}

func TestDomainImportsNoNATS(t *testing.T) {
	for _, p := range list(t) {
		if !under(p.ImportPath, "pipeline") {
			continue
		}
		for _, d := range p.Deps {
			if strings.HasPrefix(d, "github.com/nats-io/") {
				t.Errorf("%s depends on %s: the domain never imports NATS", p.ImportPath, d)
			}
		}
	}
}

// TestJetStreamAPIImportsNothingOfTheModule: internal/jsapi speaks
// JetStream's API, not tickflow's protocol; the protocol (internal/streams)
// builds on it, never the other way round.
func TestJetStreamAPIImportsNothingOfTheModule(t *testing.T) {
	found := false
	for _, p := range list(t) {
		if !under(p.ImportPath, "internal/jsapi") {
			continue
		}
		found = true
		for _, d := range p.Deps {
			if d == module || strings.HasPrefix(d, module+"/") {
				t.Errorf("%s depends on %s: the JetStream API imports no other package of the module (CONTRIBUTING.md, where things go)", p.ImportPath, d)
			}
		}
	}
	if !found {
		t.Fatal("go list did not list internal/jsapi")
	}
}

// recordsMayImport are the only packages of the module internal/records
// imports: the records are pure data, their codecs built on internal/wire
// over the domain's types.
var recordsMayImport = []string{"internal/wire", "pipeline"}

// TestRecordsArePureData: internal/records imports no package of the
// module but internal/wire and pipeline (not internal/streams, whose
// names, messages and stores build on it), and depends on no NATS package
// (no jetstream, not even nats.go).
func TestRecordsArePureData(t *testing.T) {
	found := false
	for _, p := range list(t) {
		if !under(p.ImportPath, "internal/records") {
			continue
		}
		found = true
		checkRecordsImports(t, p)
	}
	if !found {
		t.Fatal("go list did not list internal/records")
	}
}

// checkRecordsImports reports every import of p that the records' rule
// forbids.
func checkRecordsImports(t testing.TB, p pkg) {
	t.Helper()
	for _, d := range p.Imports {
		if (d == module || strings.HasPrefix(d, module+"/")) &&
			!slices.ContainsFunc(recordsMayImport, func(rel string) bool { return d == module+"/"+rel }) {
			t.Errorf("%s imports %s: the records import no package of the module but %v (CONTRIBUTING.md, where things go)", p.ImportPath, d, recordsMayImport)
		}
	}
	for _, d := range p.Deps {
		if strings.HasPrefix(d, "github.com/nats-io/") {
			t.Errorf("%s depends on %s: the records are pure data and depend on no NATS package", p.ImportPath, d)
		}
	}
}

// TestRecordsRuleCatchesStreams: the rule fails a records package that
// imports internal/streams (and, through it, jetstream), so the check
// above cannot pass by checking nothing.
func TestRecordsRuleCatchesStreams(t *testing.T) {
	bad := pkg{
		ImportPath: module + "/internal/records",
		Imports:    []string{module + "/internal/wire", module + "/pipeline", module + "/internal/streams"},
		Deps:       []string{module + "/internal/streams", "github.com/nats-io/nats.go/jetstream"},
	}
	rec := &recorder{TB: t}
	checkRecordsImports(rec, bad)
	if want := 2; len(rec.errs) != want {
		t.Fatalf("the rule reported %d violations of a records package importing internal/streams, want %d: %q", len(rec.errs), want, rec.errs)
	}
	rec = &recorder{TB: t}
	checkRecordsImports(rec, pkg{ImportPath: module + "/internal/records", Imports: []string{module + "/internal/wire", module + "/pipeline", "time"}})
	if len(rec.errs) != 0 {
		t.Fatalf("the rule refused the allowed imports: %q", rec.errs)
	}
}

// recorder collects the errors a check reports instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper() {}

// userFacing are the examples a user copies into a module of their own:
// they may import only the module's public packages.
var userFacing = []string{"examples/quickstart", "examples/billing-worker"}

func TestUserFacingExamplesImportNothingInternal(t *testing.T) {
	for _, p := range list(t) {
		if !slices.ContainsFunc(userFacing, func(rel string) bool { return under(p.ImportPath, rel) }) {
			continue
		}
		for _, d := range p.Imports {
			if under(d, "internal") {
				t.Errorf("%s imports %s: an example a user copies cannot import an internal package", p.ImportPath, d)
			}
		}
	}
}

// Examples (the Example functions of example_test.go files) are the code
// a user copies from the package documentation: like the user-facing
// examples, they may import only the module's public packages.
func TestDocumentationExamplesImportNothingInternal(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "bench" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.Name() != "example_test.go" {
			return nil
		}
		n++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); under(p, "internal") {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s imports %s: a documentation example cannot show an internal package", rel, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Fatalf("found %d example_test.go files under %s: not the module", n, root)
	}
}
