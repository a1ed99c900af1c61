package underwriting

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/tickflow/tickflow/x/steps"
)

// ApplicationForm is the p_application_form processor. It reads the
// s_application_form stipulation, a JSON Application, checks it, normalises
// it into an Applicant, and extracts the business's identity and terms as
// stipulations, with flags for a young business, a high-risk industry and a
// large request.
type ApplicationForm struct {
	// Faults, when set, injects failures at chosen steps.
	Faults *Faults
}

// Application is an application form as filed: the content of the
// s_application_form stipulation.
type Application struct {
	BusinessName string `json:"business_name"`
	// BusinessEIN is the federal Employer Identification Number, as
	// "123456789" or "12-3456789".
	BusinessEIN     string  `json:"business_ein"`
	RequestedAmount float64 `json:"requested_amount"`
	YearsInBusiness float64 `json:"years_in_business"`
	Industry        string  `json:"industry"`
}

// Applicant is a validated, normalised application: ApplicationForm's
// processing output.
type Applicant struct {
	BusinessName string `json:"business_name"`
	// EIN is nine digits, without the hyphen.
	EIN             string  `json:"ein"`
	RequestedAmount float64 `json:"requested_amount"`
	YearsInBusiness float64 `json:"years_in_business"`
	// Industry is lower case, words joined by "_".
	Industry         string `json:"industry"`
	YoungBusiness    bool   `json:"young_business"`
	HighRiskIndustry bool   `json:"high_risk_industry"`
	LargeRequest     bool   `json:"large_request"`
}

// Thresholds of the application flags.
const (
	// YoungBusinessYears is the age, in years, below which a business is
	// flagged young.
	YoungBusinessYears = 2
	// LargeRequestAmount is the requested amount above which a request is
	// flagged large.
	LargeRequestAmount = 250_000
)

// highRiskIndustries are industries most funders restrict.
var highRiskIndustries = []string{"adult_entertainment", "cannabis", "cryptocurrency", "firearms", "gambling"}

// Name implements steps.Processor.
func (*ApplicationForm) Name() string { return "application_form" }

// Required implements steps.Processor.
func (*ApplicationForm) Required() []string { return []string{"s_application_form"} }

// Optional implements steps.Processor.
func (*ApplicationForm) Optional() []string { return nil }

// Validate implements steps.Processor. It returns the Application with
// every field checked, or a *ValidationError listing what is wrong.
func (f *ApplicationForm) Validate(_ context.Context, in steps.Inputs) (any, error) {
	if err := f.Faults.check("p_application_form", steps.StepValidation); err != nil {
		return nil, err
	}
	p := &problems{processor: "p_application_form"}
	var app Application
	if !decodeDocument(p, in, "s_application_form", &app) {
		return nil, p.err()
	}
	app.BusinessName = strings.TrimSpace(app.BusinessName)
	if app.BusinessName == "" {
		p.add("business_name", "is required")
	}
	if ein, err := parseEIN(app.BusinessEIN); err != nil {
		p.add("business_ein", "%v", err)
	} else {
		app.BusinessEIN = ein
	}
	if app.RequestedAmount <= 0 {
		p.add("requested_amount", "must be positive (got %v)", app.RequestedAmount)
	}
	if app.YearsInBusiness < 0 {
		p.add("years_in_business", "must not be negative (got %v)", app.YearsInBusiness)
	}
	if strings.TrimSpace(app.Industry) == "" {
		p.add("industry", "is required")
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return app, nil
}

// Process implements steps.Processor: Application → Applicant.
func (f *ApplicationForm) Process(_ context.Context, validated any) (any, error) {
	if err := f.Faults.check("p_application_form", steps.StepProcessing); err != nil {
		return nil, err
	}
	app, ok := validated.(Application)
	if !ok {
		return nil, fmt.Errorf("underwriting: p_application_form: processing got %T, want Application", validated)
	}
	industry := strings.Join(strings.Fields(strings.ToLower(app.Industry)), "_")
	return Applicant{
		BusinessName:     strings.Join(strings.Fields(app.BusinessName), " "),
		EIN:              app.BusinessEIN,
		RequestedAmount:  app.RequestedAmount,
		YearsInBusiness:  app.YearsInBusiness,
		Industry:         industry,
		YoungBusiness:    app.YearsInBusiness < YoungBusinessYears,
		HighRiskIndustry: slices.Contains(highRiskIndustries, industry),
		LargeRequest:     app.RequestedAmount > LargeRequestAmount,
	}, nil
}

// DecodeProcessed implements steps.ProcessedDecoder.
func (*ApplicationForm) DecodeProcessed(raw []byte) (any, error) {
	var a Applicant
	err := json.Unmarshal(raw, &a)
	return a, err
}

// Extract implements steps.Processor.
func (f *ApplicationForm) Extract(_ context.Context, processed any) (steps.Extraction, error) {
	if err := f.Faults.check("p_application_form", steps.StepExtraction); err != nil {
		return nil, err
	}
	a, ok := processed.(Applicant)
	if !ok {
		return nil, fmt.Errorf("underwriting: p_application_form: extraction got %T, want Applicant", processed)
	}
	return steps.Extraction{
		"payload": map[string]any{},
		"stipulations": map[string]any{
			"business_name":     a.BusinessName,
			"business_ein":      a.EIN,
			"requested_amount":  a.RequestedAmount,
			"years_in_business": a.YearsInBusiness,
			"industry":          a.Industry,
		},
		"flags": map[string]any{
			"young_business":     a.YoungBusiness,
			"high_risk_industry": a.HighRiskIndustry,
			"large_request":      a.LargeRequest,
		},
		"factors":  map[string]any{},
		"metadata": map[string]any{"source": "s_application_form"},
	}, nil
}

// unassignedEINPrefixes are the two-digit EIN prefixes the IRS has never
// assigned.
var unassignedEINPrefixes = []string{"00", "07", "08", "09", "17", "18", "19", "28", "29", "49", "69", "70", "78", "79", "89", "96", "97"}

// parseEIN accepts "123456789" or "12-3456789" and returns the nine digits.
func parseEIN(s string) (string, error) {
	s = strings.TrimSpace(s)
	digits := s
	if len(s) == 10 && s[2] == '-' {
		digits = s[:2] + s[3:]
	}
	if len(digits) != 9 || strings.ContainsFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) {
		return "", fmt.Errorf("must be 9 digits, as 123456789 or 12-3456789 (got %q)", s)
	}
	if slices.Contains(unassignedEINPrefixes, digits[:2]) {
		return "", fmt.Errorf("prefix %s is not assigned by the IRS (got %q)", digits[:2], s)
	}
	return digits, nil
}
