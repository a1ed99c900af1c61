package dashboard

import "errors"

// ErrConfig is matched by the error New returns for a Config it cannot
// serve with.
var ErrConfig = errors.New("dashboard: invalid config")
