// Package api declares tickflow's wire API: the operations of the authz
// service (their names, request and reply types, limits and error codes)
// and the processor's tick report (its status and each step's action).
//
// It holds shapes and constants only, and imports nothing beyond the
// standard library and the domain types the messages carry (pipeline):
// a program that speaks to authz, or reads what it answers, needs no
// NATS, telemetry or configuration packages to name them. The service is
// package authz; the Go client, package client.
package api
