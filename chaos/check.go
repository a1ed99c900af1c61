package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/pipeline"
)

// EdgeWindow is how soon after a handler's effect its worker must have been
// killed for a second run of the function to count as the documented edge
// (a worker dying between the effect and its completion record): the record
// is written right after the effect, so a kill later than this left a
// record behind, and a second run despite it is a duplicate.
const EdgeWindow = 2 * time.Second

// Verdict is what the checker found in one run.
type Verdict struct {
	// Batches counts the accepted batches.
	Batches int
	// Callbacks counts the callbacks (a group's members each), and
	// CallbackMessages the messages that carried them.
	Callbacks, CallbackMessages int
	// Lost counts accepted batches without a terminal record or callback.
	Lost int
	// ExtraCallbacks counts callbacks beyond the first of a batch: a
	// callback published again after a crash (no problem while they agree,
	// and the record shows one application).
	ExtraCallbacks int
	// Wrong counts batches whose record disagrees with its callbacks, whose
	// callbacks disagree with each other, whose record shows its outcome
	// applied more than once, or whose outcome is not the one its
	// functions call for.
	Wrong int
	// Duplicates counts functions that took effect more than once, not
	// explained by a worker killed between effect and record.
	Duplicates int
	// EdgeDuplicates counts functions that took effect twice because their
	// worker was killed between the effect and its completion record.
	EdgeDuplicates int
	// Stray counts effects of functions the outcome says did not take
	// effect, and Missing completed functions with no effect at all.
	Stray, Missing int
	// Leftovers counts what terminal batches left behind: progress short of
	// done, worker claims, concurrency slots, queue tokens.
	Leftovers int
	// DLQ counts the dead letters; DLQWrong the batches with a dead letter
	// they should not have, or without one they should.
	DLQ, DLQWrong int
	// Orphans counts batches recorded that no client was told about: a
	// submission accepted twice.
	Orphans int
	// Unanswered counts the plain submissions whose answer did not come,
	// and UnansweredRecorded the batches recorded without an idempotency
	// key that no client was told about: at most one for each of those,
	// each checked like an accepted batch (it must finish).
	Unanswered, UnansweredRecorded int
	// Problems says what went wrong, one line per kind, with examples.
	Problems []string
}

// Passed reports whether every invariant held. Edge duplicates are
// allowed: the worker documents them.
func (v *Verdict) Passed() bool { return len(v.Problems) == 0 }

// problems collects batch ids per kind of violation.
type problems map[string][]uint64

func (p problems) add(kind string, id uint64) { p[kind] = append(p[kind], id) }

func (p problems) lines() []string {
	kinds := make([]string, 0, len(p))
	for k := range p {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var out []string
	for _, k := range kinds {
		ids := p[k]
		slices.Sort(ids)
		ids = slices.Compact(ids)
		ex := make([]string, 0, 8)
		for i, id := range ids {
			if i == 8 {
				ex = append(ex, "…")
				break
			}
			ex = append(ex, fmt.Sprint(id))
		}
		out = append(out, fmt.Sprintf("%s: %d batches (%s)", k, len(ids), strings.Join(ex, ", ")))
	}
	return out
}

// Check holds the final state against what was submitted and the kills
// dealt.
func Check(subs []*Submission, st *State, kills []Kill) *Verdict {
	v := &Verdict{}
	p := problems{}
	specs := map[uint64]Spec{}
	unaccepted := 0
	for _, s := range subs {
		if s.Unanswered {
			v.Unanswered++
			continue
		}
		if !s.Accepted {
			unaccepted++
			continue
		}
		v.Batches++
		specs[s.ID] = s.Spec
		key := s.Key
		if s.Plain {
			key = "" // sent without it
		}
		if rec, ok := st.Records[s.ID]; ok && rec.IdempotencyKey != key {
			p.add("record of another submission (idempotency key differs)", s.ID)
		}
	}
	// Every recorded batch is checked, including one no client knows of.
	ids, unanswered := map[uint64]bool{}, map[uint64]bool{}
	for id := range specs {
		ids[id] = true
	}
	for id, rec := range st.Records {
		ids[id] = true
		if _, ok := specs[id]; !ok {
			if rec.IdempotencyKey == "" && v.UnansweredRecorded < v.Unanswered {
				v.UnansweredRecorded++ // a plain submission whose answer did not come
				unanswered[id] = true
			} else {
				v.Orphans++
				p.add("recorded but never acknowledged to a client (a submission accepted twice?)", id)
			}
			if spec, ok := specFromRecord(rec); ok {
				specs[id] = spec
			}
		}
	}
	for _, cbs := range st.Callbacks {
		v.Callbacks += len(cbs)
	}
	v.CallbackMessages = st.CallbackMessages
	for id, n := range st.DeadLetters {
		v.DLQ += n
		if id == 0 {
			p.add("undecodable dead letters", 0)
		}
	}
	terminal := map[uint64]pipeline.Outcome{}
	for id := range ids {
		rec, hasRec := st.Records[id]
		cbs := st.Callbacks[id]
		switch {
		case unanswered[id] && (!rec.Status.Terminal() || len(cbs) == 0):
			v.Lost++
			p.add("recorded, its sender without an answer, and not finished (queued nowhere?)", id)
			continue
		case !hasRec || !rec.Status.Terminal() || len(cbs) == 0:
			v.Lost++
			p.add("accepted but not finished (no terminal record or no callback)", id)
			continue
		case len(cbs) > 1:
			// Published again after a crash (a group cannot be deduplicated
			// per batch): authz applies the first.
			v.ExtraCallbacks += len(cbs) - 1
		}
		o := pipeline.Outcome{Status: rec.Status}
		if rec.Outcome != nil {
			o = *rec.Outcome
		}
		terminal[id] = o
		agree := true
		for _, cb := range cbs[1:] {
			agree = agree && cb.Outcome.Status == cbs[0].Outcome.Status && cb.Outcome.Executed == cbs[0].Outcome.Executed
		}
		want := specs[id].Expected()
		switch {
		case !agree:
			v.Wrong++
			p.add("callbacks of one batch disagree", id)
		case applications(&rec) > 1:
			v.Wrong++
			p.add("outcome applied to the record more than once", id)
		case cbs[0].Outcome.Status != o.Status || cbs[0].Outcome.Executed != o.Executed:
			v.Wrong++
			p.add("record disagrees with its callback", id)
		case o.Status != want.Status || o.Executed != want.Executed:
			v.Wrong++
			p.add(fmt.Sprintf("outcome not the one its functions call for (e.g. %s, want %s)", capped(o.String()), want), id)
		}
		failed := o.Status == pipeline.Rejected || o.Status == pipeline.PartiallyExecuted
		switch n := st.DeadLetters[id]; {
		case failed && n == 0:
			v.DLQWrong++
			p.add("failed without a dead letter", id)
		case !failed && n > 0:
			v.DLQWrong++
			p.add("dead letter for a batch that did not fail", id)
		case n > 1:
			v.DLQWrong++
			p.add("more than one dead letter", id)
		}
		if pr, ok := st.Progress[id]; ok && pr.State != records.Done {
			v.Leftovers++
			p.add("progress record short of done for a finished batch", id)
		}
		if len(st.Claims[id]) > 0 {
			v.Leftovers += len(st.Claims[id])
			p.add("worker claim left for a finished batch", id)
		}
		if len(st.Slots[id]) > 0 {
			v.Leftovers += len(st.Slots[id])
			p.add("concurrency slot left for a finished batch", id)
		}
		if n := st.Tokens[id]; n > 0 {
			v.Leftovers += n
			p.add("queue token left for a finished batch", id)
		}
	}
	if n := st.Tokens[0]; n > 0 {
		v.Leftovers += n
		p.add("undecodable queue tokens left", 0)
	}
	checkEffects(v, p, specs, terminal, st.Executions, kills)
	v.Problems = p.lines()
	if unaccepted > 0 {
		v.Problems = append(v.Problems, fmt.Sprintf("submissions authz never accepted before the deadline: %d", unaccepted))
	}
	return v
}

// applications counts the terminal callbacks applied to rec, by its
// history: authz adds the event once, as it makes the record terminal.
func applications(rec *records.BatchRecord) int {
	n := 0
	for _, e := range rec.History {
		if e.What == records.EventCallback {
			n++
		}
	}
	return n
}

// specFromRecord rebuilds a spec from a record, for a batch no client
// knows of.
func specFromRecord(rec records.BatchRecord) (Spec, bool) {
	s := Spec{Label: rec.Batch.Label}
	for _, f := range rec.Batch.Functions {
		var st Step
		if err := f.Payload.Decode(&st); err != nil {
			return Spec{}, false
		}
		s.Steps = append(s.Steps, st)
	}
	return s, true
}

type fnKey struct {
	batch uint64
	index int
}

// checkEffects counts, for every finished batch, the effects of each
// function: exactly one for a function that took effect, none for the
// others. A second effect whose earlier runs all died with their worker
// within EdgeWindow is the documented edge.
func checkEffects(v *Verdict, p problems, specs map[uint64]Spec, terminal map[uint64]pipeline.Outcome, execs []Execution, kills []Kill) {
	effects := map[fnKey][]Execution{}
	for _, e := range execs {
		if e.OK {
			k := fnKey{e.BatchID, e.Index}
			effects[k] = append(effects[k], e)
		}
	}
	killedAt := map[int]time.Time{}
	for _, k := range kills {
		if k.Kind == KindWorker {
			killedAt[k.PID] = k.At
		}
	}
	for id, o := range terminal {
		spec := specs[id]
		took := o.Executed
		if o.Status == pipeline.Executed {
			took = len(spec.Steps)
		}
		for i := range spec.Steps {
			runs := effects[fnKey{id, i}]
			sort.Slice(runs, func(a, b int) bool { return runs[a].At.Before(runs[b].At) })
			switch {
			case i >= took && len(runs) > 0:
				v.Stray++
				p.add("effect of a function the outcome says did not take effect", id)
			case i < took && len(runs) == 0:
				v.Missing++
				p.add("function counted as done that never took effect", id)
			case len(runs) > 1:
				if diedAfterEffect(runs[:len(runs)-1], killedAt) {
					v.EdgeDuplicates++
				} else {
					v.Duplicates++
					p.add("function that took effect more than once", id)
				}
			}
		}
	}
}

// diedAfterEffect reports whether every run's worker was killed within
// EdgeWindow after its effect.
func diedAfterEffect(runs []Execution, killedAt map[int]time.Time) bool {
	for _, r := range runs {
		at, ok := killedAt[r.PID]
		if !ok || at.Before(r.At) || at.Sub(r.At) > EdgeWindow {
			return false
		}
	}
	return true
}
