package authz

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/pipeline"
)

// TestAPIDefaults reads the defaults and bounds docs/api.md states for the
// authorization table and the operations' pages, and compares each with the
// constant authz applies, so that a changed default fails here until the
// document says the same. Each phrase must occur at least once, and every
// occurrence must state the constant's value.
func TestAPIDefaults(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ") // phrases may wrap
	tests := []struct {
		name    string
		pattern string
		want    []int
	}{
		{"max_per_key", "`max_per_key` \\(default (\\d+)\\)", []int{DefaultMaxPerKey}},
		{"max_per_key in the table", "one submitter may have on one key under the label \\(default (\\d+)\\)", []int{DefaultMaxPerKey}},
		{"max_functions bounds", "one batch under the label may hold \\(1 to (\\d+)\\)", []int{pipeline.MaxFunctions}},
		{"max_functions defaults", "Default (\\d+) for a batch with a `sender: true` function \\([^)]*\\), else (\\d+)", []int{DefaultSenderMaxFunctions, pipeline.MaxFunctions}},
		{"max_functions of a sender batch", "`max_functions` functions \\(default (\\d+)\\)", []int{DefaultSenderMaxFunctions}},
		{"max_requests", "a quarter of the replica's (\\d+) workers \\(`authz.Options.Concurrency`\\): (\\d+)", []int{DefaultConcurrency, defaultMaxRequests(DefaultConcurrency)}},
		{"keys limit", "at most `limit` \\(default (\\d+), at most (\\d+);", []int{api.DefaultKeysLimit, api.MaxKeysLimit}},
		{"list limit", "the page size: `limit` \\(1 to (\\d+), default (\\d+)\\)", []int{api.MaxListLimit, api.DefaultListLimit}},
		{"list limit error", "`authz: limit 600: expected 1 to (\\d+), or 0 for (\\d+)`", []int{api.MaxListLimit, api.DefaultListLimit}},
		{"inflight limit", "oldest first, up to `limit` \\(1 to (\\d+), default (\\d+)\\)", []int{api.MaxInFlight, api.DefaultInFlight}},
		{"inflight limit field", "the batches listed: 1 to (\\d+), 0 for (\\d+)", []int{api.MaxInFlight, api.DefaultInFlight}},
		{"inflight limit error", "`authz: limit 5000: expected 1 to (\\d+), or 0 for (\\d+)`", []int{api.MaxInFlight, api.DefaultInFlight}},
		{"keys limit error", "`authz: limit -1: expected 1 to (\\d+), or 0 for (\\d+)`", []int{api.MaxKeysLimit, api.DefaultKeysLimit}},
		{"dlq limit", "the dead letters listed: 1 to (\\d+); 0, or more, lists (\\d+)", []int{api.MaxDLQLimit, api.DefaultDLQLimit}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			matches := regexp.MustCompile(tt.pattern).FindAllStringSubmatch(doc, -1)
			if len(matches) == 0 {
				t.Fatalf("docs/api.md no longer states %s (no match for %q): state it, or change this test with it", tt.name, tt.pattern)
			}
			for _, m := range matches {
				for i, want := range tt.want {
					if got, _ := strconv.Atoi(m[i+1]); got != want {
						t.Errorf("docs/api.md says %q: value %d is %d in the code", m[0], i+1, want)
					}
				}
			}
		})
	}
}
