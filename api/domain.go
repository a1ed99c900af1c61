package api

import (
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// DomainRequest names a domain.
type DomainRequest struct {
	Domain string `json:"domain"`
}

// StateReply is a domain's pause state.
type StateReply struct {
	Domain string `json:"domain"`
	Paused bool   `json:"paused"`
}

// DomainsReply lists the domains of the authorization table.
type DomainsReply struct {
	Domains []DomainInfo `json:"domains"`
}

// DomainInfo is one domain's pause state and queue depths.
type DomainInfo struct {
	Domain string `json:"domain"`
	Paused bool   `json:"paused"`
	// PausedBy and At say who changed the state last, and when.
	PausedBy string    `json:"by,omitempty"`
	At       time.Time `json:"at,omitzero"`
	// Depth counts the tokens of each priority's queue: the batches waiting
	// for their turn, those a processor holds (running, waiting on a retry
	// delay or a confirmation), and tokens a processor has not dropped yet
	// since their batch moved on. The queue operation lists the live ones.
	Depth map[pipeline.Priority]uint64 `json:"depth"`
	// DeadLetters counts the domain's dead letters kept.
	DeadLetters uint64 `json:"dead_letters"`
	// Throttle, when the domain's processors are throttled, is the last
	// second's budget they drew from: the steps per second allowed, the
	// second (Unix time) and the steps taken in it.
	Throttle *ThrottleWindow `json:"throttle,omitempty"`
}

// ReloadReply says how many labels the reloaded table has, and warns of
// what in it nothing running serves.
type ReloadReply struct {
	Labels int `json:"labels"`
	// Warnings name each label whose domain no running processor serves
	// and each function type no running worker serves (authz.Service.Unserved);
	// empty when everything is served.
	Warnings []string `json:"warnings"`
}
