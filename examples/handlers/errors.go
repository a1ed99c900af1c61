package handlers

import "errors"

// Sentinel errors of the example handlers; each is returned wrapped, with
// the details, and is permanent when a handler returns it.
var (
	// ErrInsufficientFunds: the transfer's source account cannot cover it.
	ErrInsufficientFunds = errors.New("handlers: insufficient funds")
	// ErrForeignAccount: the transfer moves money from an account other than
	// the submitter's, under a label that may not.
	ErrForeignAccount = errors.New("handlers: transfer from another's account")
	// ErrDestination: http.post refused to connect to an address its
	// configuration does not open.
	ErrDestination = errors.New("handlers: destination not allowed")
	// ErrAllowEntry: an entry of NewHTTP's allow list is not an IP prefix,
	// an IP address or an address and port.
	ErrAllowEntry = errors.New("handlers: invalid allow entry")
)

// ErrUnknownTx: a poll asked about a transaction the example chain never
// saw (its worker restarted, or the reference is not one of its own).
var ErrUnknownTx = errors.New("handlers: unknown transaction")
