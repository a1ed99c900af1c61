package streams

import "errors"

// ErrSettings is matched by errors from Settings.Validate.
var ErrSettings = errors.New("streams: invalid settings")

// ErrReplyRefused is returned by CheckReply and Reply for a reply subject
// that is not an inbox: a service does not publish where a caller points it.
var ErrReplyRefused = errors.New("streams: reply subject refused: not an inbox")

// ErrConflict is matched by a compare-and-set write that another writer won:
// read again and retry (UpdateKV does).
var ErrConflict = errors.New("streams: changed concurrently")
