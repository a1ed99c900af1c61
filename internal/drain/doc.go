// Package drain holds what a component's Run needs to stop without losing
// what it took: a Gate that admits handlers until shutdown and then waits
// for the ones it admitted, and waits for NATS subscriptions to have handed
// over every message the server sent them.
//
// nats.go's Subscription.Drain and micro's Service.Stop return at once: the
// messages already in the client keep being delivered to the handler on the
// subscription's goroutine after they return. A component that waits only
// on its own WaitGroup can therefore return while a handler is about to
// start, and a WaitGroup Add racing its Wait is a misuse. The shutdown
// sequence this package supports is:
//
//  1. stop the subscriptions (Drain, micro Stop), so the server sends no
//     more;
//  2. Gate.Close, so a handler that starts from now on refuses its message
//     (a request is answered "shutting down", and its caller tries
//     elsewhere) instead of doing the work;
//  3. Gate.Wait, for the work admitted before;
//  4. Closed or Delivered, so every message already in the client has
//     reached its handler, and been refused, before Run returns.
package drain
