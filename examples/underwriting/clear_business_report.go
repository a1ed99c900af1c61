package underwriting

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/tickflow/tickflow/x/steps"
)

// ClearBusinessReport is the p_clear_business_report processor of the underwriting flow.
// From the p_application_form result it takes the business's name and EIN,
// looks up its public records in Records, and grades each kind of record
// as a flag ("Low", "Medium", "High"). When a successful p_bank_statement
// result is among the inputs, it also flags an account holder whose name
// does not match the business's.
type ClearBusinessReport struct {
	// Records is where public records come from; processing fails with
	// ErrNoRecordSource without one.
	Records RecordSource
	// Faults, when set, injects failures at chosen steps.
	Faults *Faults
}

// ReportSubject is the business a report is about: ClearBusinessReport's
// validation output.
type ReportSubject struct {
	BusinessName string `json:"business_name"`
	EIN          string `json:"ein"`
	// AccountHolder is the bank account's holder; empty without a usable
	// p_bank_statement result.
	AccountHolder string `json:"account_holder,omitempty"`
}

// Report is ClearBusinessReport's processing output.
type Report struct {
	Subject ReportSubject `json:"subject"`
	Records PublicRecords `json:"records"`
	// HolderMismatch is true when the bank account's holder is not the
	// business; always false without a bank statement.
	HolderMismatch bool `json:"holder_mismatch"`
}

// Name implements steps.Processor.
func (*ClearBusinessReport) Name() string { return "clear_business_report" }

// Required implements steps.Processor.
func (*ClearBusinessReport) Required() []string { return []string{"p_application_form"} }

// Optional implements steps.Processor.
func (*ClearBusinessReport) Optional() []string { return []string{"p_bank_statement"} }

// Validate implements steps.Processor. The application result must be a
// success whose stipulations hold a business name and a nine-digit EIN. A
// failed bank statement result is ignored, as if absent.
func (c *ClearBusinessReport) Validate(_ context.Context, in steps.Inputs) (any, error) {
	if err := c.Faults.check("p_clear_business_report", steps.StepValidation); err != nil {
		return nil, err
	}
	p := &problems{processor: "p_clear_business_report"}
	form, ok := in.Result("p_application_form")
	switch {
	case !ok:
		p.add("p_application_form", "is missing from the inputs")
		return nil, p.err()
	case !form.Success:
		why := "no error recorded"
		if form.Error != nil {
			why = fmt.Sprintf("%s: %s", form.Error.Step, form.Error.Message)
		}
		p.add("p_application_form", "must be a successful result (run %s failed at %s)", form.RunID, why)
		return nil, p.err()
	}
	stips, _ := form.ExtractionOutput["stipulations"].(map[string]any)
	subj := ReportSubject{}
	subj.BusinessName, _ = stips["business_name"].(string)
	if strings.TrimSpace(subj.BusinessName) == "" {
		p.add("p_application_form.stipulations.business_name", "is required")
	}
	subj.EIN, _ = stips["business_ein"].(string)
	if len(subj.EIN) != 9 || strings.ContainsFunc(subj.EIN, func(r rune) bool { return r < '0' || r > '9' }) {
		p.add("p_application_form.stipulations.business_ein", "must be 9 digits (got %q)", subj.EIN)
	}
	if bank, ok := in.Result("p_bank_statement"); ok && bank.Success {
		bs, _ := bank.ExtractionOutput["stipulations"].(map[string]any)
		subj.AccountHolder, _ = bs["account_holder"].(string)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return subj, nil
}

// Process implements steps.Processor: it queries Records.
func (c *ClearBusinessReport) Process(ctx context.Context, validated any) (any, error) {
	if err := c.Faults.check("p_clear_business_report", steps.StepProcessing); err != nil {
		return nil, err
	}
	subj, ok := validated.(ReportSubject)
	if !ok {
		return nil, fmt.Errorf("underwriting: p_clear_business_report: processing got %T, want ReportSubject", validated)
	}
	if c.Records == nil {
		return nil, ErrNoRecordSource
	}
	recs, err := c.Records.PublicRecords(ctx, subj.EIN)
	if err != nil {
		return nil, fmt.Errorf("underwriting: p_clear_business_report: public records of EIN %s: %w", subj.EIN, err)
	}
	return Report{
		Subject:        subj,
		Records:        recs,
		HolderMismatch: subj.AccountHolder != "" && canonicalName(subj.AccountHolder) != canonicalName(subj.BusinessName),
	}, nil
}

// DecodeProcessed implements steps.ProcessedDecoder.
func (*ClearBusinessReport) DecodeProcessed(raw []byte) (any, error) {
	var r Report
	err := json.Unmarshal(raw, &r)
	return r, err
}

// Extract implements steps.Processor.
func (c *ClearBusinessReport) Extract(_ context.Context, processed any) (steps.Extraction, error) {
	if err := c.Faults.check("p_clear_business_report", steps.StepExtraction); err != nil {
		return nil, err
	}
	r, ok := processed.(Report)
	if !ok {
		return nil, fmt.Errorf("underwriting: p_clear_business_report: extraction got %T, want Report", processed)
	}
	flags := map[string]any{
		"lawsuits":            level(r.Records.Lawsuits),
		"dockets":             level(r.Records.Dockets),
		"criminal_history":    level(r.Records.CriminalHistory),
		"ucc_filings":         level(r.Records.UCCFilings),
		"liens_and_judgments": level(r.Records.LiensAndJudgments),
	}
	if r.Subject.AccountHolder != "" {
		flags["account_holder_mismatch"] = r.HolderMismatch
	}
	return steps.Extraction{
		"payload": map[string]any{"records": map[string]any{
			"lawsuits":            r.Records.Lawsuits,
			"dockets":             r.Records.Dockets,
			"criminal_history":    r.Records.CriminalHistory,
			"ucc_filings":         r.Records.UCCFilings,
			"liens_and_judgments": r.Records.LiensAndJudgments,
		}},
		"stipulations": map[string]any{"business_name": r.Subject.BusinessName, "business_ein": r.Subject.EIN},
		"flags":        flags,
		"factors":      map[string]any{"public_record_count": r.Records.Total()},
		"metadata":     map[string]any{"source": "clear", "bank_statement_used": r.Subject.AccountHolder != ""},
	}, nil
}

// legalSuffixes are dropped when comparing business names.
var legalSuffixes = []string{"co", "company", "corp", "corporation", "inc", "incorporated", "llc", "ltd", "limited", "lp", "llp", "pllc"}

// canonicalName reduces a business name to its lower-case words, without
// punctuation or trailing legal suffixes: "ACME Corp." and "Acme, Inc." are
// both "acme".
func canonicalName(s string) string {
	words := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	for len(words) > 1 && slices.Contains(legalSuffixes, words[len(words)-1]) {
		words = words[:len(words)-1]
	}
	return strings.Join(words, " ")
}
