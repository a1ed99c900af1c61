package keyorder

import "errors"

// ErrBound is matched by a join of a key's order refused because its
// submitter's batches listed there already reach the bound asked for
// (Store.AppendBy).
var ErrBound = errors.New("keyorder: too many unfinished batches of one submitter on the key")
