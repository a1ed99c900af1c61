package api

import "time"

// Presence is a running process as its presence record says: api's view
// of the record, with its JSON.
type Presence struct {
	// Name is the process's configured name (not unique: replicas often
	// share one).
	Name string `json:"name"`
	// Kind is "processor" or "worker".
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

// PresenceReply lists what runs, from the presence records: each
// processor replica with its domains and each worker with its function
// types, oldest start first, and a warning for each label's domain and
// function type nothing running serves (as reload and start log them).
type PresenceReply struct {
	Processors []Presence `json:"processors"`
	Workers    []Presence `json:"workers"`
	Unserved   []string   `json:"unserved"`
}
