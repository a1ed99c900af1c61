// Command tickflow speaks to tickflow's authz service from a shell: send a
// batch and wait for its outcome, list and cancel your batches, and, as the
// owner, inspect and steer the queues, dead letters and domains.
//
//	tickflow send --label jobs noop 'flaky={"fail_attempts":1}'
//	tickflow wait 74
//	tickflow --user owner dlq --domain payments
//
// It connects as the nats tool does: flags, then NATS_URL, NATS_USER,
// NATS_PASSWORD (and the others), then the nats context. docs/cli.md has
// every subcommand and the exit codes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], Stdio())
	stop()
	os.Exit(code)
}
