package underwriting

import "context"

// PublicRecords counts the public records filed against a business.
type PublicRecords struct {
	Lawsuits          int `json:"lawsuits"`
	Dockets           int `json:"dockets"`
	CriminalHistory   int `json:"criminal_history"`
	UCCFilings        int `json:"ucc_filings"`
	LiensAndJudgments int `json:"liens_and_judgments"`
}

// Total is the number of records of every kind.
func (r PublicRecords) Total() int {
	return r.Lawsuits + r.Dockets + r.CriminalHistory + r.UCCFilings + r.LiensAndJudgments
}

// RecordSource looks up the public records of a business, e.g. the CLEAR
// service. It must be safe for concurrent use and, being called again on a
// retry, idempotent (cache it if calls cost money).
type RecordSource interface {
	// PublicRecords returns the records filed against the business with the
	// nine-digit EIN ein; a business with none has zero counts.
	PublicRecords(ctx context.Context, ein string) (PublicRecords, error)
}

// StaticRecords is a RecordSource backed by a map from EIN to records, for
// tests and demos. An EIN it does not hold has no records.
type StaticRecords map[string]PublicRecords

// PublicRecords implements RecordSource.
func (s StaticRecords) PublicRecords(ctx context.Context, ein string) (PublicRecords, error) {
	if err := ctx.Err(); err != nil {
		return PublicRecords{}, err
	}
	return s[ein], nil
}
