package keyorder

import (
	"context"
	"sync"
)

// keyTurns lets the writes of one key in a store take turns, first come
// first served; a key nobody writes has no entry.
type keyTurns struct {
	mu    sync.Mutex
	lines map[string]*keyTurn
}

type keyTurn struct {
	turn  chan struct{} // holds a value while a write runs
	users int           // writes running or waiting
}

// take waits for k's turn; done ends it.
func (t *keyTurns) take(ctx context.Context, k string) (done func(), err error) {
	t.mu.Lock()
	l := t.lines[k]
	if l == nil {
		l = &keyTurn{turn: make(chan struct{}, 1)}
		t.lines[k] = l
	}
	l.users++
	t.mu.Unlock()
	leave := func() {
		t.mu.Lock()
		if l.users--; l.users == 0 {
			delete(t.lines, k)
		}
		t.mu.Unlock()
	}
	select {
	case l.turn <- struct{}{}:
		return func() { <-l.turn; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}
