package records

import "time"

// Kinds of presence record.
const (
	// PresenceProcessor is a processor replica, serving Presence.Domains.
	PresenceProcessor = "processor"
	// PresenceWorker is a worker, serving Presence.Types.
	PresenceWorker = "worker"
)

// Presence is the record a running processor replica or worker keeps in
// streams.BucketPresence, so that authz can tell which domains and function types
// something serves without asking the processes themselves.
type Presence struct {
	// Name is the process's configured name (not unique: replicas often
	// share one).
	Name string `json:"name"`
	// Kind is PresenceProcessor or PresenceWorker.
	Kind string `json:"kind"`
	// Domains a processor serves.
	Domains []string `json:"domains,omitempty"`
	// Types are the function types a worker serves.
	Types []string `json:"types,omitempty"`
	// Since is when the process started serving.
	Since time.Time `json:"since"`
	// At is when the record was last written.
	At time.Time `json:"at"`
}
