package processor

import (
	"fmt"
	"slices"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/pipeline"
)

// recordHeadroom is kept free of a record's maximum size for headers and
// the fields around the outputs.
const recordHeadroom = 8 << 10

// recordLimits sizes records against the server's max_payload.
type recordLimits struct {
	// maxPayload is the server's max_payload (nats.Conn.MaxPayload).
	maxPayload func() int64
}

// maxRecord is the largest message the server takes, less room for headers.
func (l recordLimits) maxRecord() int { return int(l.maxPayload()) - 1<<10 }

// fits checks that the batch's progress, with extra outputs added, stays
// small enough to be written, to travel as the next function's inputs
// beside its call, and to go into a dead letter beside the batch: the
// server's max_payload less the batch and some headroom. It encodes the
// record only when a cheap upper bound says it might not fit.
func (l recordLimits) fits(b *pipeline.Batch, prog *records.Progress, extra ...pipeline.Output) error {
	maxPayload := int(l.maxPayload())
	limit := maxPayload - batchSize(b) - recordHeadroom
	est := 1<<10 + len(prog.LastError) + 10*(len(prog.Failures)+len(prog.Rounds)+len(prog.Fallbacks))
	for _, o := range prog.Outputs {
		est += outputSize(o)
	}
	for _, o := range extra {
		est += outputSize(o)
	}
	if prog.Parked != nil {
		est += outputSize(prog.Parked.Output)
	}
	if est <= limit {
		return nil
	}
	c := *prog
	c.Outputs = append(slices.Clip(prog.Outputs), extra...)
	v, err := records.Encode(&c)
	if err != nil {
		return err
	}
	if len(v) <= limit {
		return nil
	}
	return fmt.Errorf("%w: they would take %d bytes, and the server's max_payload of %d bytes leaves %d beside the batch",
		ErrOutputsTooLarge, len(v), maxPayload, max(limit, 0))
}

// outputSize bounds an output's encoded size from above.
func outputSize(o pipeline.Output) int { return len(o.Data) + len(o.Type) + 48 }

// batchSize bounds a batch's encoded size from above.
func batchSize(b *pipeline.Batch) int {
	n := 1<<10 + len(b.Key)
	for _, f := range b.Functions {
		n += len(f.Payload) + len(f.Type) + 256
	}
	return n
}
