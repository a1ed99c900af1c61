package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies: the client speaks the API through package api, not
// through the service: it pulls in none of authz, its telemetry
// (Prometheus, OpenTelemetry) or its configuration (yaml).
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"/tickflow/authz", "/tickflow/telemetry", "/tickflow/config", "prometheus", "opentelemetry", "yaml"} {
			if strings.Contains(dep, banned) {
				t.Errorf("the client depends on %s", dep)
			}
		}
	}
}
