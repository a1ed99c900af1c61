package senderlease

import "errors"

// ErrNoSender is returned by Acquire when every sender of the pool is
// leased to another batch.
var ErrNoSender = errors.New("senderlease: every sender is leased")

// ErrShare is returned by Acquire when the batch's submitter holds its
// share of the domain's sender pool already (Lease.Share): the batch
// waits, as for a free sender, until one of its submitter's other batches
// ends.
var ErrShare = errors.New("senderlease: the submitter holds its share of the senders")
