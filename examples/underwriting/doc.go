// Package underwriting holds example processors for the steps pipeline,
// a loan underwriting flow: p_application_form reads the application form a business
// filed, p_bank_statement summarises its bank statements, and
// p_clear_business_report builds a public-records risk report from the
// application (and, when present, cross-checks the bank statement).
//
// The processors are stateless apart from their configuration and safe for
// concurrent use. Each has a Faults field to inject failures at a chosen
// step, for tests and failure drills.
package underwriting
