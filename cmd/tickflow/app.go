package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/tickflow/tickflow/client"
)

// Env is what a run of the command reads and writes besides its arguments.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads the environment (os.Getenv in main).
	Getenv func(string) string
}

// Globals are the flags every subcommand takes.
type Globals struct {
	Connection `embed:""`
	JSON       bool `name:"json" help:"Print the reply as JSON instead of a table."`
}

// CLI is the command line: the global flags and one subcommand.
type CLI struct {
	Globals `embed:""`

	Send      SendCmd      `cmd:"" help:"Submit a batch under a label, from arguments and/or a JSON or YAML file."`
	SendMany  SendManyCmd  `cmd:"" name:"send-many" help:"Submit the batches of a JSON Lines file, up to 1000 a request."`
	Batch     BatchCmd     `cmd:"" help:"Show a batch: its record, progress and outputs."`
	Wait      WaitCmd      `cmd:"" help:"Wait until one of your batches finished; exit 0 when it executed, 6 when not."`
	List      ListCmd      `cmd:"" help:"List your batches, newest first."`
	Cancel    CancelCmd    `cmd:"" help:"Cancel one of your batches."`
	Confirm   ConfirmCmd   `cmd:"" help:"Confirm a function waiting for a confirmation."`
	Domains   DomainsCmd   `cmd:"" group:"owner" help:"Every domain: pause state, queue depths, dead letters."`
	Queue     QueueCmd     `cmd:"" group:"owner" help:"A domain's queue in order."`
	Inflight  InflightCmd  `cmd:"" group:"owner" help:"A domain's unfinished batches, oldest first."`
	Keys      KeysCmd      `cmd:"" group:"owner" help:"A domain's keys: each one's running batch and how many wait."`
	Senders   SendersCmd   `cmd:"" group:"owner" help:"A domain's senders, free or leased."`
	Pause     PauseCmd     `cmd:"" group:"owner" help:"Pause a domain's processors."`
	Resume    ResumeCmd    `cmd:"" group:"owner" help:"Resume a domain's processors."`
	DLQ       DLQCmd       `cmd:"" name:"dlq" group:"owner" help:"List dead letters."`
	Replay    ReplayCmd    `cmd:"" group:"owner" help:"Queue dead letters again as new batches."`
	Purge     PurgeCmd     `cmd:"" group:"owner" help:"Remove dead letters for good."`
	Reload    ReloadCmd    `cmd:"" group:"owner" help:"Make authz read its authorization table again."`
	Schedules SchedulesCmd `cmd:"" group:"owner" help:"The table's periodic schedules; pause or resume one."`
}

const description = `tickflow speaks to tickflow's authz service as one user, over NATS.

Connection settings are read as the nats tool reads them: a flag, else its
environment variable, else the nats context (--context, $NATS_CONTEXT, else
the one "nats context select" chose), else the default.

Exit codes: 0 ok, 1 usage or invalid request, 2 connection (or authz not
running, no answer), 3 not found, 4 forbidden or conflict, 5 too many
requests, 6 the batch waited for did not execute, 7 internal error, 8 the
batch waited for had not finished in time.`

// Run runs the command line args (without the program's name) and returns
// its exit code: ExitOK, or the code of what failed, after saying what
// on stderr.
func Run(ctx context.Context, args []string, env Env) int {
	var cli CLI
	exited, code := false, 0
	parser, err := kong.New(&cli,
		kong.Name("tickflow"),
		kong.Description(description),
		kong.Writers(env.Stdout, env.Stderr),
		kong.Exit(func(c int) { exited, code = true, c }),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.ExplicitGroups([]kong.Group{{Key: "owner", Title: "Owner commands:"}}),
	)
	if err != nil {
		fmt.Fprintf(env.Stderr, "tickflow: %v\n", err)
		return ExitInternal
	}
	kctx, err := parser.Parse(args)
	if exited { // --help
		return code
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "tickflow: %v\n", err)
		var pe *kong.ParseError
		if errors.As(err, &pe) && pe.Context != nil {
			fmt.Fprintf(env.Stderr, "Run '%s --help' for usage.\n", strings.TrimSpace("tickflow "+pe.Context.Command()))
		}
		return ExitUsage
	}
	kctx.BindTo(ctx, (*context.Context)(nil))
	err = kctx.Run(&cli.Globals, &env)
	if err == nil {
		return ExitOK
	}
	code = exitCode(err)
	fmt.Fprintf(env.Stderr, "tickflow %s: %s\n", strings.Fields(kctx.Command())[0], message(err))
	if errors.Is(err, client.ErrNoAnswer) {
		fmt.Fprintln(env.Stderr, "(a request the server's permissions deny gets no answer either: --as must name the user the connection is made as)")
	}
	return code
}

// message says what went wrong, without the prefixes of the sentinels
// that only choose the exit code.
func message(err error) string {
	var me *manyError
	if errors.As(err, &me) {
		return me.msg
	}
	var le *lineError
	if errors.As(err, &le) {
		return fmt.Sprintf("line %d: %s", le.line, message(le.err))
	}
	var ae *client.Error
	if errors.As(err, &ae) {
		return fmt.Sprintf("%d %s", ae.Code, ae.Message)
	}
	msg := err.Error()
	for _, s := range []error{errUsage, errSettings, errBatchFailed, errWaitTimeout} {
		msg = strings.TrimPrefix(msg, s.Error()+": ")
	}
	return strings.TrimPrefix(msg, "client: ")
}

// Stdio is the process's own Env.
func Stdio() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// usage is a bad-input error saying what was wrong.
func usage(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}
