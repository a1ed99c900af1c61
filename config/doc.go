// Package config loads and validates the configuration of the tickflow
// commands: Processor, Worker, Tick, Authz and Run, built from the shared
// sections NATS, Embedded, Streams and Log. Every field's documentation
// states its default; the DefaultX functions return them.
//
// A command's config comes from four places, each overriding the one
// before:
//
//  1. the defaults, e.g. DefaultProcessor();
//  2. its section of the YAML config file (-config or TICKFLOW_CONFIG), one
//     file holding a section per command (see tickflow.example.yaml);
//  3. the environment: TICKFLOW_<SECTION>_<KEY>, the yaml keys of the
//     field's path upper-cased and joined by underscores
//     (TICKFLOW_PROCESSOR_CONCURRENCY, TICKFLOW_TICK_NATS_URL,
//     TICKFLOW_RUN_EMBEDDED_LISTEN), plus the standard NATS_URL, NATS_USER,
//     NATS_PASSWORD, NATS_CREDS and NATS_NKEY for the NATS section;
//  4. command-line flags.
//
// Parse does all four and validates; Load does 2 and 3. Validation errors
// are *FieldError values joined with errors.Join, each matching ErrInvalid
// and naming the field as written in the file, e.g.
//
//	config: processor.domains[1]: "a.b" must not contain '.', '*', '>', spaces or control characters (found "." at 1)
package config
