package underwriting_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/tickflow/tickflow/examples/underwriting"
	"github.com/tickflow/tickflow/x/steps"
)

// The three processors chained for one underwriting: the documents feed
// p_application_form and p_bank_statement, whose results feed
// p_clear_business_report.
func Example() {
	ctx := context.Background()
	store := steps.NewMemoryStore()
	mustRunner := func(p steps.Processor) *steps.Runner {
		r, err := steps.New(p, store)
		if err != nil {
			panic(err)
		}
		return r
	}
	form := mustRunner(&underwriting.ApplicationForm{})
	bank := mustRunner(&underwriting.BankStatement{})
	report := mustRunner(&underwriting.ClearBusinessReport{Records: underwriting.StaticRecords{
		"123456789": {UCCFilings: 1},
	}})

	application := steps.Stipulation{Name: "s_application_form", SubjectID: "UW-123", Content: []byte(
		`{"business_name":"ACME Corp","business_ein":"12-3456789","requested_amount":50000,"years_in_business":3,"industry":"retail"}`)}
	statement := steps.Stipulation{Name: "s_bank_statement", SubjectID: "UW-123", Content: []byte(
		`{"account_holder":"Acme, Inc.","months":[{"month":"2025-07","deposits":40000,"ending_balance":2500}]}`)}

	formResult := form.Execute(ctx, "UW-123", []steps.Input{application}, nil)
	bankResult := bank.Execute(ctx, "UW-123", []steps.Input{statement}, nil)
	res := report.Execute(ctx, "UW-123", []steps.Input{formResult, bankResult}, nil)

	fmt.Println(res.ProcessorName, res.Success)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res.ExtractionOutput["flags"]); err != nil {
		panic(err)
	}
	// Output:
	// p_clear_business_report true
	// {
	//   "account_holder_mismatch": false,
	//   "criminal_history": "Low",
	//   "dockets": "Low",
	//   "lawsuits": "Low",
	//   "liens_and_judgments": "Low",
	//   "ucc_filings": "Medium"
	// }
}

// Validation reports every problem of an application at once.
func ExampleValidationError() {
	r, err := steps.New(&underwriting.ApplicationForm{}, steps.NewMemoryStore())
	if err != nil {
		panic(err)
	}
	doc := steps.Stipulation{Name: "s_application_form", SubjectID: "UW-123", Content: []byte(
		`{"business_name":"ACME Corp","business_ein":"12-345","requested_amount":0,"industry":"retail"}`)}
	res := r.Execute(context.Background(), "UW-123", []steps.Input{doc}, nil)

	fmt.Println(res.Error.Step, res.Error.Exception)
	fmt.Println(res.Error.Message)
	// Output:
	// validation *underwriting.ValidationError
	// underwriting: p_application_form: invalid input: business_ein: must be 9 digits, as 123456789 or 12-3456789 (got "12-345"); requested_amount: must be positive (got 0)
}

// Faults makes a step fail on demand; the retry resumes at that step.
func ExampleFaults() {
	store := steps.NewMemoryStore()
	faults := new(underwriting.Faults)
	faults.FailNext(steps.StepExtraction, 1)
	r, err := steps.New(&underwriting.BankStatement{Faults: faults}, store)
	if err != nil {
		panic(err)
	}
	doc := steps.Stipulation{Name: "s_bank_statement", SubjectID: "UW-123", Content: []byte(
		`{"account_holder":"ACME Corp","months":[{"month":"2025-07","deposits":40000,"ending_balance":2500}]}`)}

	first := r.Execute(context.Background(), "UW-123", []steps.Input{doc}, nil)
	retry := r.Execute(context.Background(), "UW-123", []steps.Input{doc}, nil)

	fmt.Println(first.Error.Message)
	fmt.Println(retry.Success, "resumed at", retry.Context.Metadata[steps.MetaResumeStep])
	fmt.Println("processing runs:", r.Runs(steps.StepProcessing))
	// Output:
	// underwriting: p_bank_statement: injected failure at extraction
	// true resumed at extraction
	// processing runs: 1
}
