package chaos

import "errors"

// Sentinels of the chaos suite.
var (
	// ErrBuild is returned when the commands cannot be built.
	ErrBuild = errors.New("chaos: build")
	// ErrNoRepository is returned when no go.mod is found above the
	// working directory.
	ErrNoRepository = errors.New("chaos: not inside the tickflow repository")
	// ErrNotReady is returned when a process or server does not come up.
	ErrNotReady = errors.New("chaos: not ready")
	// ErrUnknownScenario is returned for a scenario name that does not exist.
	ErrUnknownScenario = errors.New("chaos: unknown scenario")
	// ErrRejected is returned when authz refuses a submission for a reason
	// retrying cannot mend (a bad request, a forbidden label).
	ErrRejected = errors.New("chaos: submission rejected")
	// ErrNoServer is returned for a server name the system does not run.
	ErrNoServer = errors.New("chaos: no such server")
)
