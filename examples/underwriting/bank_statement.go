package underwriting

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tickflow/tickflow/x/steps"
)

// BankStatement is the p_bank_statement processor. It reads the
// s_bank_statement stipulation, a JSON Statement of monthly account
// summaries, and extracts the account's cash flow: average deposits, the
// lowest balance, NSF (insufficient funds) events and gaps in the months
// covered.
type BankStatement struct {
	// Faults, when set, injects failures at chosen steps.
	Faults *Faults
}

// Statement is a bank statement: the content of the s_bank_statement
// stipulation.
type Statement struct {
	AccountHolder string         `json:"account_holder"`
	Months        []MonthSummary `json:"months"`
}

// MonthSummary is one calendar month of an account.
type MonthSummary struct {
	// Month is "YYYY-MM".
	Month         string  `json:"month"`
	Deposits      float64 `json:"deposits"`
	Withdrawals   float64 `json:"withdrawals"`
	EndingBalance float64 `json:"ending_balance"`
	// NSFCount counts the month's insufficient-funds events.
	NSFCount int `json:"nsf_count"`
}

// CashFlow summarises a Statement: BankStatement's processing output.
type CashFlow struct {
	AccountHolder          string  `json:"account_holder"`
	FirstMonth             string  `json:"first_month"`
	LastMonth              string  `json:"last_month"`
	MonthsCovered          int     `json:"months_covered"`
	MissingMonths          int     `json:"missing_months"`
	AverageMonthlyDeposits float64 `json:"average_monthly_deposits"`
	LowestEndingBalance    float64 `json:"lowest_ending_balance"`
	NegativeBalanceMonths  int     `json:"negative_balance_months"`
	NSFCount               int     `json:"nsf_count"`
}

// Name implements steps.Processor.
func (*BankStatement) Name() string { return "bank_statement" }

// Required implements steps.Processor.
func (*BankStatement) Required() []string { return []string{"s_bank_statement"} }

// Optional implements steps.Processor.
func (*BankStatement) Optional() []string { return nil }

// Validate implements steps.Processor. It returns the Statement with its
// months sorted, or a *ValidationError listing what is wrong.
func (b *BankStatement) Validate(_ context.Context, in steps.Inputs) (any, error) {
	if err := b.Faults.check("p_bank_statement", steps.StepValidation); err != nil {
		return nil, err
	}
	p := &problems{processor: "p_bank_statement"}
	var st Statement
	if !decodeDocument(p, in, "s_bank_statement", &st) {
		return nil, p.err()
	}
	st.AccountHolder = strings.TrimSpace(st.AccountHolder)
	if st.AccountHolder == "" {
		p.add("account_holder", "is required")
	}
	if len(st.Months) == 0 {
		p.add("months", "must list at least one month")
	}
	seen := map[string]bool{}
	for i, m := range st.Months {
		field := fmt.Sprintf("months[%d]", i)
		if _, err := time.Parse("2006-01", m.Month); err != nil {
			p.add(field+".month", "must be YYYY-MM (got %q)", m.Month)
		} else if seen[m.Month] {
			p.add(field+".month", "%s is listed twice", m.Month)
		}
		seen[m.Month] = true
		if m.Deposits < 0 {
			p.add(field+".deposits", "must not be negative (got %v)", m.Deposits)
		}
		if m.Withdrawals < 0 {
			p.add(field+".withdrawals", "must not be negative (got %v)", m.Withdrawals)
		}
		if m.NSFCount < 0 {
			p.add(field+".nsf_count", "must not be negative (got %d)", m.NSFCount)
		}
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	st.Months = slices.Clone(st.Months)
	slices.SortFunc(st.Months, func(a, b MonthSummary) int { return strings.Compare(a.Month, b.Month) })
	return st, nil
}

// Process implements steps.Processor: Statement → CashFlow.
func (b *BankStatement) Process(_ context.Context, validated any) (any, error) {
	if err := b.Faults.check("p_bank_statement", steps.StepProcessing); err != nil {
		return nil, err
	}
	st, ok := validated.(Statement)
	if !ok {
		return nil, fmt.Errorf("underwriting: p_bank_statement: processing got %T, want Statement", validated)
	}
	first, _ := time.Parse("2006-01", st.Months[0].Month)
	last, _ := time.Parse("2006-01", st.Months[len(st.Months)-1].Month)
	span := (last.Year()-first.Year())*12 + int(last.Month()-first.Month()) + 1
	cf := CashFlow{
		AccountHolder:       st.AccountHolder,
		FirstMonth:          st.Months[0].Month,
		LastMonth:           st.Months[len(st.Months)-1].Month,
		MonthsCovered:       len(st.Months),
		MissingMonths:       span - len(st.Months),
		LowestEndingBalance: math.Inf(1),
	}
	var deposits float64
	for _, m := range st.Months {
		deposits += m.Deposits
		cf.LowestEndingBalance = min(cf.LowestEndingBalance, m.EndingBalance)
		if m.EndingBalance < 0 {
			cf.NegativeBalanceMonths++
		}
		cf.NSFCount += m.NSFCount
	}
	cf.AverageMonthlyDeposits = math.Round(deposits/float64(len(st.Months))*100) / 100
	return cf, nil
}

// DecodeProcessed implements steps.ProcessedDecoder.
func (*BankStatement) DecodeProcessed(raw []byte) (any, error) {
	var cf CashFlow
	err := json.Unmarshal(raw, &cf)
	return cf, err
}

// Extract implements steps.Processor.
func (b *BankStatement) Extract(_ context.Context, processed any) (steps.Extraction, error) {
	if err := b.Faults.check("p_bank_statement", steps.StepExtraction); err != nil {
		return nil, err
	}
	cf, ok := processed.(CashFlow)
	if !ok {
		return nil, fmt.Errorf("underwriting: p_bank_statement: extraction got %T, want CashFlow", processed)
	}
	return steps.Extraction{
		"payload": map[string]any{"first_month": cf.FirstMonth, "last_month": cf.LastMonth},
		"stipulations": map[string]any{
			"account_holder":           cf.AccountHolder,
			"average_monthly_deposits": cf.AverageMonthlyDeposits,
			"months_covered":           cf.MonthsCovered,
		},
		"flags": map[string]any{
			"nsf":              level(cf.NSFCount),
			"negative_balance": cf.NegativeBalanceMonths > 0,
			"missing_months":   cf.MissingMonths > 0,
		},
		"factors": map[string]any{
			"lowest_ending_balance":   cf.LowestEndingBalance,
			"negative_balance_months": cf.NegativeBalanceMonths,
			"nsf_count":               cf.NSFCount,
		},
		"metadata": map[string]any{"source": "s_bank_statement"},
	}, nil
}

// level grades a count of adverse events: none is "Low", one or two
// "Medium", three or more "High".
func level(n int) string {
	switch {
	case n <= 0:
		return "Low"
	case n <= 2:
		return "Medium"
	default:
		return "High"
	}
}
