// Package ticker publishes the ticks that make processors take steps: on an
// interval, on a cron schedule, or once.
//
// A tick is a core NATS message on streams.TickSubject(domain). The
// processors of a domain receive it in one queue group, so each tick reaches
// one replica. Its body is empty for one step, or the step count as decimal
// text (see processor.ParseTick). Ticks are permissionless by design: anyone
// may tick, and `nats pub tick.<domain> ""` is a valid tick.
//
// A Ticker owns no goroutines and holds no state between fires; ticks missed
// while nothing ran are not made up. TickOnce and Request send a single tick
// without a Ticker, Request waiting for the processor's report.
package ticker
