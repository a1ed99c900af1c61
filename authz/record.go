package authz

import (
	"context"
	"errors"
	"fmt"

	"github.com/tickflow/tickflow/streams"
)

// errUnrecorded stops updateRecord when the batch has no record.
var errUnrecorded = errors.New("authz: batch not recorded")

// updateRecord applies change to the record of batch id with
// compare-and-set (streams.UpdateKV), and returns the record as written, or
// nil when change wrote nothing (it returned false). A batch without a
// record gives an error matching errUnrecorded; a record that does not
// decode, one matching ErrUnreadable.
func (s *Service) updateRecord(ctx context.Context, id uint64, change func(*streams.BatchRecord) (bool, error)) (*streams.BatchRecord, error) {
	var written *streams.BatchRecord
	_, err := streams.UpdateKV(ctx, s.batches, streams.BatchKey(id), func(cur []byte, exists bool) ([]byte, error) {
		written = nil
		if !exists {
			return nil, fmt.Errorf("%w: %d", errUnrecorded, id)
		}
		rec, err := streams.Decode[streams.BatchRecord](cur)
		if err != nil {
			return nil, unreadable(fmt.Sprintf("record of batch %d", id), rec.V, err)
		}
		if write, err := change(&rec); err != nil || !write {
			return nil, err
		}
		data, err := streams.Encode(&rec)
		if err != nil {
			return nil, err
		}
		written = &rec
		return data, nil
	})
	if err != nil {
		return nil, err
	}
	return written, nil
}
