package underwriting

import (
	"fmt"

	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/x/steps"
)

// Function types Register serves. Each takes a steps.Request payload; a
// non-atomic batch [TypeApplicationForm, TypeBankStatement,
// TypeClearBusinessReport] is one underwriting, the report receiving the
// first two results as inputs.
const (
	TypeApplicationForm     = "underwriting.application_form"
	TypeBankStatement       = "underwriting.bank_statement"
	TypeClearBusinessReport = "underwriting.clear_business_report"
)

// Processors are the processors Register serves. A nil ApplicationForm or
// BankStatement means the zero processor; ClearBusinessReport is required,
// with its Records set.
type Processors struct {
	ApplicationForm     *ApplicationForm
	BankStatement       *BankStatement
	ClearBusinessReport *ClearBusinessReport
}

// Runners are the runners Register serves, one per processor; their Runs
// counters tell which steps ran.
type Runners struct {
	ApplicationForm     *steps.Runner
	BankStatement       *steps.Runner
	ClearBusinessReport *steps.Runner
}

// Register serves ps on mux as TypeApplicationForm, TypeBankStatement and
// TypeClearBusinessReport (see steps.Handler), each recording its runs in
// store with opts applied, and returns their runners. Workers sharing store
// (e.g. a kvstore.Store) resume each other's failed runs.
//
// It returns an error, registering nothing, if the report processor is
// missing or has no Records (wrapping ErrNoRecordSource: every report would
// fail), or if a runner cannot be built (steps.New's errors, e.g.
// steps.ErrNilStore). Like pipeline.ServeMux.Register, it panics if one of
// the types is already registered on mux.
func Register(mux *pipeline.ServeMux, store steps.RunStore, ps Processors, opts ...steps.Option) (*Runners, error) {
	if ps.ApplicationForm == nil {
		ps.ApplicationForm = &ApplicationForm{}
	}
	if ps.BankStatement == nil {
		ps.BankStatement = &BankStatement{}
	}
	if ps.ClearBusinessReport == nil || ps.ClearBusinessReport.Records == nil {
		return nil, fmt.Errorf("underwriting: register: %w: set Processors.ClearBusinessReport.Records", ErrNoRecordSource)
	}
	var rs Runners
	for _, r := range []struct {
		p   steps.Processor
		dst **steps.Runner
	}{
		{ps.ApplicationForm, &rs.ApplicationForm},
		{ps.BankStatement, &rs.BankStatement},
		{ps.ClearBusinessReport, &rs.ClearBusinessReport},
	} {
		runner, err := steps.New(r.p, store, opts...)
		if err != nil {
			return nil, fmt.Errorf("underwriting: register: %w", err)
		}
		*r.dst = runner
	}
	mux.Register(TypeApplicationForm, steps.Handler(rs.ApplicationForm))
	mux.Register(TypeBankStatement, steps.Handler(rs.BankStatement))
	mux.Register(TypeClearBusinessReport, steps.Handler(rs.ClearBusinessReport))
	return &rs, nil
}
