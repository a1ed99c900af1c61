package api_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsOnlyTheDomain: api is the API's shapes alone; a program that
// names them pulls in no transport, service, telemetry or configuration
// package, only the domain types the messages carry.
func TestImportsOnlyTheDomain(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/nats-io/", "/tickflow/streams", "/tickflow/authz", "/tickflow/telemetry",
			"/tickflow/config", "prometheus", "opentelemetry", "yaml"} {
			if strings.Contains(dep, banned) {
				t.Errorf("api depends on %s", dep)
			}
		}
	}
}
