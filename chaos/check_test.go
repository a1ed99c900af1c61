package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/pipeline"
)

// finished builds the state of batches that all finished as their specs
// say, each function's effect logged once by pid 100.
func finished(subs []*Submission) *State {
	st := &State{
		Records: map[uint64]records.BatchRecord{}, Callbacks: map[uint64][]records.Callback{},
		DeadLetters: map[uint64]int{}, Progress: map[uint64]records.Progress{},
		Claims: map[uint64][]string{}, Slots: map[uint64][]string{}, Tokens: map[uint64]int{},
	}
	at := time.Unix(1000, 0)
	for _, s := range subs {
		o := s.Spec.Expected()
		st.Records[s.ID] = records.BatchRecord{Status: o.Status, Outcome: &o, IdempotencyKey: s.Key}
		st.Callbacks[s.ID] = []records.Callback{{BatchID: s.ID, Outcome: o}}
		if o.Status != pipeline.Executed {
			st.DeadLetters[s.ID] = 1
		}
		took := o.Executed
		if o.Status == pipeline.Executed {
			took = len(s.Spec.Steps)
		}
		for i := range took {
			st.Executions = append(st.Executions, Execution{At: at, BatchID: s.ID, Index: i, Attempt: 1, PID: 100, OK: true})
		}
	}
	return st
}

func submissions() []*Submission {
	return []*Submission{
		{Key: "a", ID: 1, Accepted: true, Spec: Spec{Label: LabelSteps, Steps: []Step{{}, {}, {}}}},
		{Key: "b", ID: 2, Accepted: true, Spec: Spec{Label: LabelSteps, Steps: []Step{{}, {Fail: true}, {}}}},
		{Key: "c", ID: 3, Accepted: true, Spec: Spec{Label: LabelAtomic, Steps: []Step{{}, {}}}},
		{Key: "d", ID: 4, Accepted: true, Spec: Spec{Label: LabelAtomic, Steps: []Step{{Fail: true}, {}}}},
	}
}

func TestCheck(t *testing.T) {
	at := time.Unix(1000, 0)
	tests := []struct {
		name    string
		mutate  func(*State) []Kill
		want    func(*Verdict) bool
		problem string // "" means the run passes
	}{
		{name: "clean", mutate: func(*State) []Kill { return nil }, want: func(v *Verdict) bool { return v.Batches == 4 && v.Callbacks == 4 && v.DLQ == 2 }},
		{name: "lost", mutate: func(st *State) []Kill {
			delete(st.Callbacks, 1)
			st.Records[1] = records.BatchRecord{Status: pipeline.InProcess, IdempotencyKey: "a"}
			return nil
		}, want: func(v *Verdict) bool { return v.Lost == 1 }, problem: "not finished"},
		{name: "a callback published again, agreeing", mutate: func(st *State) []Kill {
			st.Callbacks[1] = append(st.Callbacks[1], st.Callbacks[1][0])
			return nil
		}, want: func(v *Verdict) bool { return v.ExtraCallbacks == 1 && v.Wrong == 0 }},
		{name: "callbacks of one batch disagree", mutate: func(st *State) []Kill {
			st.Callbacks[1] = append(st.Callbacks[1], records.Callback{BatchID: 1, Outcome: pipeline.FailedAfter(1, "worker did not answer")})
			return nil
		}, want: func(v *Verdict) bool { return v.ExtraCallbacks == 1 && v.Wrong == 1 }, problem: "callbacks of one batch disagree"},
		{name: "a duplicate that disagrees with the record", mutate: func(st *State) []Kill {
			o := pipeline.FailedAfter(1, "worker did not answer")
			st.Callbacks[1] = []records.Callback{{BatchID: 1, Outcome: o}, {BatchID: 1, Outcome: o}}
			return nil
		}, want: func(v *Verdict) bool { return v.ExtraCallbacks == 1 && v.Wrong == 1 }, problem: "record disagrees with its callback"},
		{name: "outcome applied twice", mutate: func(st *State) []Kill {
			rec := st.Records[1]
			rec.History = []records.Event{{What: records.EventCallback}, {What: "note"}, {What: records.EventCallback}}
			st.Records[1] = rec
			st.Callbacks[1] = append(st.Callbacks[1], st.Callbacks[1][0])
			return nil
		}, want: func(v *Verdict) bool { return v.Wrong == 1 }, problem: "applied to the record more than once"},
		{name: "outcome applied once", mutate: func(st *State) []Kill {
			rec := st.Records[1]
			rec.History = []records.Event{{What: "accepted"}, {What: records.EventCallback}}
			st.Records[1] = rec
			return nil
		}, want: func(v *Verdict) bool { return v.Wrong == 0 }},
		{name: "duplicate", mutate: func(st *State) []Kill {
			st.Executions = append(st.Executions, Execution{At: at.Add(time.Second), BatchID: 1, Index: 0, Attempt: 2, PID: 200, OK: true})
			return nil
		}, want: func(v *Verdict) bool { return v.Duplicates == 1 && v.EdgeDuplicates == 0 }, problem: "more than once"},
		{name: "worker killed after the effect", mutate: func(st *State) []Kill {
			st.Executions = append(st.Executions, Execution{At: at.Add(time.Second), BatchID: 1, Index: 0, Attempt: 2, PID: 200, OK: true})
			return []Kill{{At: at.Add(10 * time.Millisecond), Kind: KindWorker, PID: 100}}
		}, want: func(v *Verdict) bool { return v.Duplicates == 0 && v.EdgeDuplicates == 1 }},
		{name: "worker killed long after the effect", mutate: func(st *State) []Kill {
			st.Executions = append(st.Executions, Execution{At: at.Add(time.Minute), BatchID: 1, Index: 0, Attempt: 2, PID: 200, OK: true})
			return []Kill{{At: at.Add(30 * time.Second), Kind: KindWorker, PID: 100}}
		}, want: func(v *Verdict) bool { return v.Duplicates == 1 }, problem: "more than once"},
		{name: "failed attempts are no effects", mutate: func(st *State) []Kill {
			st.Executions = append(st.Executions, Execution{At: at, BatchID: 2, Index: 1, Attempt: 1, PID: 100})
			return nil
		}, want: func(v *Verdict) bool { return v.Duplicates == 0 && v.Stray == 0 }},
		{name: "effect past the failure", mutate: func(st *State) []Kill {
			st.Executions = append(st.Executions, Execution{At: at, BatchID: 2, Index: 1, Attempt: 1, PID: 100, OK: true})
			return nil
		}, want: func(v *Verdict) bool { return v.Stray == 1 }, problem: "did not take effect"},
		{name: "wrong outcome", mutate: func(st *State) []Kill {
			o := pipeline.FailedAfter(1, "worker did not answer")
			st.Records[1] = records.BatchRecord{Status: o.Status, Outcome: &o, IdempotencyKey: "a"}
			st.Callbacks[1] = []records.Callback{{BatchID: 1, Outcome: o}}
			st.DeadLetters[1] = 1
			return nil
		}, want: func(v *Verdict) bool { return v.Wrong == 1 && v.Stray == 2 }, problem: "call for"},
		{name: "leftovers", mutate: func(st *State) []Kill {
			st.Progress[2] = records.Progress{BatchID: 2, State: records.Queued}
			st.Claims[1] = []string{"1.0.0"}
			st.Slots[3] = []string{LabelAtomic}
			st.Tokens[4] = 1
			return nil
		}, want: func(v *Verdict) bool { return v.Leftovers == 4 }, problem: "left"},
		{name: "done progress is no leftover", mutate: func(st *State) []Kill {
			st.Progress[2] = records.Progress{BatchID: 2, State: records.Done}
			return nil
		}, want: func(v *Verdict) bool { return v.Leftovers == 0 }},
		{name: "dead letter of a success", mutate: func(st *State) []Kill {
			st.DeadLetters[1] = 1
			return nil
		}, want: func(v *Verdict) bool { return v.DLQWrong == 1 }, problem: "did not fail"},
		{name: "failure without a dead letter", mutate: func(st *State) []Kill {
			delete(st.DeadLetters, 4)
			return nil
		}, want: func(v *Verdict) bool { return v.DLQWrong == 1 }, problem: "without a dead letter"},
		{name: "submission accepted twice", mutate: func(st *State) []Kill {
			st.Records[9] = records.BatchRecord{Status: pipeline.Executed, Outcome: &pipeline.Outcome{Status: pipeline.Executed}, IdempotencyKey: "a"}
			st.Callbacks[9] = []records.Callback{{BatchID: 9, Outcome: pipeline.Outcome{Status: pipeline.Executed}}}
			return nil
		}, want: func(v *Verdict) bool { return v.Orphans == 1 }, problem: "never acknowledged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			subs := submissions()
			st := finished(subs)
			kills := tt.mutate(st)
			v := Check(subs, st, kills)
			if !tt.want(v) {
				t.Fatalf("verdict %+v", v)
			}
			if tt.problem == "" {
				if !v.Passed() {
					t.Fatalf("problems %q, want none", v.Problems)
				}
				return
			}
			if v.Passed() || !strings.Contains(strings.Join(v.Problems, "\n"), tt.problem) {
				t.Fatalf("problems %q do not mention %q", v.Problems, tt.problem)
			}
		})
	}
}

// TestCheckUnaccepted: a submission authz never accepted fails the run.
func TestCheckUnaccepted(t *testing.T) {
	subs := submissions()
	st := finished(subs)
	subs = append(subs, &Submission{Key: "e", Spec: Spec{Label: LabelSteps, Steps: []Step{{}}}})
	v := Check(subs, st, nil)
	if v.Batches != 4 || v.Passed() || !strings.Contains(strings.Join(v.Problems, "\n"), "never accepted") {
		t.Fatalf("verdict %+v", v)
	}
}

func TestSpecExpected(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want pipeline.Outcome
	}{
		{name: "all succeed", spec: Spec{Label: LabelSteps, Steps: []Step{{}, {FailAttempts: 1}}}, want: pipeline.ExecutedOutcome(2)},
		{name: "first fails", spec: Spec{Label: LabelSteps, Steps: []Step{{Fail: true}, {}}}, want: pipeline.Outcome{Status: pipeline.Rejected}},
		{name: "second fails", spec: Spec{Label: LabelSteps, Steps: []Step{{}, {Fail: true}}}, want: pipeline.Outcome{Status: pipeline.PartiallyExecuted, Executed: 1}},
		{name: "atomic fails", spec: Spec{Label: LabelAtomic, Steps: []Step{{}, {Fail: true}}}, want: pipeline.Outcome{Status: pipeline.Rejected}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.spec.Expected(); got.Status != tt.want.Status || got.Executed != tt.want.Executed {
				t.Fatalf("Expected() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestCheckUnansweredPlain: a plain submission whose answer did not come
// is not sent again; its batch, if recorded, no client knows of, and it
// must finish like any other; two such records for one unanswered
// submission are one too many.
func TestCheckUnansweredPlain(t *testing.T) {
	plain := &Submission{Key: "e", Plain: true, Unanswered: true, Spec: Spec{Label: LabelSteps, Steps: []Step{{}}}}
	recorded := func() ([]*Submission, *State) {
		subs := submissions()
		st := finished(append(subs, &Submission{ID: 5, Spec: plain.Spec}))
		rec := st.Records[5]
		rec.IdempotencyKey = ""
		rec.Batch.Label = LabelSteps
		rec.Batch.Functions = []pipeline.Function{{Type: TypeRecord, Payload: pipeline.MustPayload(Step{})}}
		st.Records[5] = rec
		return append(subs, plain), st
	}
	subs, st := recorded()
	if v := Check(subs, st, nil); !v.Passed() || v.Unanswered != 1 || v.UnansweredRecorded != 1 || v.Batches != 4 {
		t.Fatalf("finished: verdict %+v", v)
	}
	if v := Check(append(submissions(), plain), finished(submissions()), nil); !v.Passed() || v.Unanswered != 1 || v.UnansweredRecorded != 0 {
		t.Fatalf("never recorded: verdict %+v", v)
	}
	subs, st = recorded()
	st.Records[5] = records.BatchRecord{Status: pipeline.InProcess, Batch: st.Records[5].Batch}
	delete(st.Callbacks, 5)
	if v := Check(subs, st, nil); v.Passed() || v.Lost != 1 || !strings.Contains(strings.Join(v.Problems, "\n"), "queued nowhere") {
		t.Fatalf("recorded, not finished: verdict %+v", v)
	}
	subs, st = recorded()
	st.Records[6], st.Callbacks[6] = st.Records[5], st.Callbacks[5]
	if v := Check(subs, st, nil); v.Passed() || v.Orphans != 1 {
		t.Fatalf("two records for one unanswered submission: verdict %+v", v)
	}
}
