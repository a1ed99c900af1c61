// Package steps runs a processor as a four-step pipeline (a
// BaseProcessor): dependency → validation → processing → extraction.
//
// A Processor declares its name and its dependencies and implements the
// three business steps; New checks the declaration and returns a Runner,
// which adds the dependency check, structured errors, run lineage and resume
// from the failed step. Execute is a single attempt with a fresh run id: it
// stops at the first failing step and returns a *Result, never an error and
// never a panic.
//
// # Dependencies
//
// Only names starting with "p_" (another processor's Result, named
// "p_"+Name()) or "s_" (a Stipulation, a document) count as dependencies;
// other declared names are ignored. Every required dependency must be among
// the inputs (else *DependencyNotFoundError), and no input carrying a declared
// dependency's name may belong to another subject (else
// *DependencyMismatchError).
//
// # Lineage and resume
//
// Every attempt is recorded in a RunStore under (processor, subject). The next
// attempt reads that record: after a failure it continues the chain (same
// parent run id, previous run id = the failed run, retry count + 1); after a
// success, or when there is no record, it starts a new chain whose parent is
// itself.
//
// When the inputs hash (InputHash) equals the previous failed attempt's, the
// runner resumes instead of starting over:
//
//	previous attempt failed at   next attempt starts at
//	dependency                   dependency (full rerun)
//	validation                   validation (dependency skipped)
//	processing                   validation (re-validate, then process)
//	extraction                   extraction (with the persisted processing output)
//
// A changed hash, a previous success, no previous attempt, an unknown step,
// or a processing output that is missing or cannot be decoded means a full
// rerun: rerunning a step is always safe because steps are idempotent.
//
// Step outputs are persisted as JSON, so a resume works after a worker
// restart and on another replica. Only the processing output is needed to
// resume, and only when extraction fails, so that is the only one written:
// the happy path costs one LatestRun and one SaveRun.
package steps
