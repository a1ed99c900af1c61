package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteDocKeepsTheProse rewrites a copy of the repository's
// docs/benchmarks.md as a run does: the generated section is replaced, and
// the method before it and the pointer to the past runs after it stay as
// they are.
func TestWriteDocKeepsTheProse(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	old := string(doc)
	for _, m := range []string{beginMarker, endMarker} {
		if n := strings.Count(old, m); n != 1 {
			t.Fatalf("docs/benchmarks.md holds the marker %q %d times, want once", m, n)
		}
	}
	before, _, _ := strings.Cut(old, beginMarker)
	_, after, _ := strings.Cut(old, endMarker)
	for _, want := range []string{"## What is measured", "## Results"} {
		if !strings.Contains(before, want) {
			t.Errorf("the part before the generated section lacks %q", want)
		}
	}
	if !strings.Contains(after, "benchmarks-log.md") {
		t.Errorf("the part after the generated section lacks the link to benchmarks-log.md")
	}

	path := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeDoc(path, "the new report\n"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := before + beginMarker + "\n\nthe new report\n\n" + endMarker + "\n" + strings.TrimPrefix(after, "\n")
	if string(got) != want {
		t.Errorf("writeDoc changed the prose around the generated section:\ngot  %q…\nwant %q…", lastChars(string(got)), lastChars(want))
	}
}

func lastChars(s string) string {
	if len(s) > 400 {
		return s[len(s)-400:]
	}
	return s
}
