package pipeline

import (
	"context"
	"errors"
	"sync"
)

// Unit is the transaction an atomic batch's handlers share: each handler may
// register how to undo its effect, and the worker runs those undo steps in
// reverse order when a later function of the unit fails. Handlers that
// implement Compensator are undone the same way without registering.
type Unit struct {
	mu        sync.Mutex
	rollbacks []func(context.Context) error
	commits   []func(context.Context) error
}

type unitKey struct{}

// WithUnit returns a context carrying u.
func WithUnit(ctx context.Context, u *Unit) context.Context {
	return context.WithValue(ctx, unitKey{}, u)
}

// UnitFrom returns the unit the call runs in, or nil outside an atomic unit.
func UnitFrom(ctx context.Context) *Unit {
	u, _ := ctx.Value(unitKey{}).(*Unit)
	return u
}

// OnRollback registers f to run if the unit fails. It is safe for concurrent use.
func (u *Unit) OnRollback(f func(context.Context) error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.rollbacks = append(u.rollbacks, f)
}

// OnCommit registers f to run once every function of the unit succeeded.
func (u *Unit) OnCommit(f func(context.Context) error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.commits = append(u.commits, f)
}

// Rollback runs the registered undo steps, last first, and joins their errors.
func (u *Unit) Rollback(ctx context.Context) error {
	u.mu.Lock()
	fs := u.rollbacks
	u.rollbacks, u.commits = nil, nil
	u.mu.Unlock()
	var errs []error
	for i := len(fs) - 1; i >= 0; i-- {
		errs = append(errs, fs[i](ctx))
	}
	return errors.Join(errs...)
}

// Commit runs the registered commit steps in order and joins their errors.
func (u *Unit) Commit(ctx context.Context) error {
	u.mu.Lock()
	fs := u.commits
	u.rollbacks, u.commits = nil, nil
	u.mu.Unlock()
	var errs []error
	for _, f := range fs {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}
