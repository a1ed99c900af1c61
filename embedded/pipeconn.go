package embedded

import (
	"net"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// pipeBuffer is how many bytes a client may have written that the server
// has not read yet before a write waits, as a socket's send buffer bounds
// it.
const pipeBuffer = 1 << 20

// closeFlush bounds how long a closed connection goes on handing the bytes
// written before its close to a server that has stopped reading them.
const closeFlush = 5 * time.Second

// bufferedPipes hands out the server's in-process connections with a send
// buffer in front of each (pipeConn).
type bufferedPipes struct{ s *server.Server }

// InProcessConn implements nats.InProcessConnProvider.
func (p bufferedPipes) InProcessConn() (net.Conn, error) {
	c, err := p.s.InProcessConn()
	if err != nil {
		return nil, err
	}
	return newPipeConn(c), nil
}

// pipeConn is the client's end of an in-process connection, with a send
// buffer, as a socket has. The server's end is a net.Pipe, whose Write
// returns only once the server's read loop has taken every byte; nats.go's
// flusher writes while it holds the connection's lock, so without a buffer
// every publisher of the connection waits while the server processes what
// it read last, and a connection carries no more than one core's worth of
// the server's work. A Write here appends to the buffer and returns; one
// goroutine hands the buffer to the pipe. Reads, addresses and read
// deadlines are the pipe's; Close ends a read at once, as a socket's does.
type pipeConn struct {
	net.Conn
	mu      sync.Mutex
	pending []byte
	// room is closed, and replaced, whenever the pump takes the pending
	// bytes, the connection closes or the pipe fails: a writer waiting for
	// room looks again.
	room     chan struct{}
	wake     chan struct{} // the pump's: bytes pending, or closed
	closed   bool
	err      error
	deadline time.Time // the write deadline: bounds a wait for room
	done     chan struct{}
	flushing *time.Timer
	// flushFor is closeFlush, shorter in tests.
	flushFor time.Duration
	limit    int // pipeBuffer, smaller in tests
}

func newPipeConn(c net.Conn) *pipeConn {
	pc := &pipeConn{Conn: c, room: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{}),
		flushFor: closeFlush, limit: pipeBuffer}
	go pc.pump()
	return pc
}

// Write buffers p, waiting first while the buffer is full.
func (c *pipeConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	for {
		switch {
		case c.closed:
			c.mu.Unlock()
			return 0, net.ErrClosed
		case c.err != nil:
			err := c.err
			c.mu.Unlock()
			return 0, err
		case len(c.pending) == 0 || len(c.pending)+len(p) <= c.limit:
			c.pending = append(c.pending, p...)
			c.mu.Unlock()
			select {
			case c.wake <- struct{}{}:
			default:
			}
			return len(p), nil
		}
		room, deadline := c.room, c.deadline
		c.mu.Unlock()
		if err := waitRoom(room, deadline); err != nil {
			return 0, err
		}
		c.mu.Lock()
	}
}

// waitRoom waits for room to close, or for the deadline (none if zero).
func waitRoom(room chan struct{}, deadline time.Time) error {
	if deadline.IsZero() {
		<-room
		return nil
	}
	d := time.Until(deadline)
	if d <= 0 {
		return os.ErrDeadlineExceeded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-room:
		return nil
	case <-t.C:
		return os.ErrDeadlineExceeded
	}
}

// freeWriters wakes every writer waiting for room. c.mu is held.
func (c *pipeConn) freeWriters() {
	close(c.room)
	c.room = make(chan struct{})
}

// pump hands the pending bytes to the pipe until the connection closes and
// every byte written before is handed, or the pipe fails.
func (c *pipeConn) pump() {
	defer func() {
		c.mu.Lock()
		if c.flushing != nil {
			c.flushing.Stop()
		}
		c.mu.Unlock()
		close(c.done)
	}()
	var out []byte
	for {
		c.mu.Lock()
		if len(c.pending) == 0 {
			closed := c.closed
			c.mu.Unlock()
			if closed {
				_ = c.Conn.Close()
				return
			}
			<-c.wake
			continue
		}
		out, c.pending = c.pending, out[:0]
		c.freeWriters()
		c.mu.Unlock()
		if _, err := c.Conn.Write(out); err != nil {
			c.mu.Lock()
			c.err, c.pending = err, nil
			c.freeWriters()
			c.mu.Unlock()
			_ = c.Conn.Close()
			return
		}
	}
}

// Close closes the connection as a socket closes: what was written before
// is still handed to the server (for at most closeFlush), then the pipe
// closes.
func (c *pipeConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.freeWriters()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	c.flushing = time.AfterFunc(c.flushFor, func() { _ = c.Conn.Close() })
	// A read in progress ends now, as on a closed socket, while the pipe
	// stays open for the bytes still to be handed.
	_ = c.Conn.SetReadDeadline(time.Now())
	return nil
}

// Read reads from the pipe; once the connection is closed it returns
// net.ErrClosed.
func (c *pipeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.isClosed() {
		return n, net.ErrClosed
	}
	return n, err
}

func (c *pipeConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// SetWriteDeadline bounds a Write's wait for room in the buffer.
func (c *pipeConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}

// SetDeadline sets the pipe's read deadline and this buffer's write
// deadline.
func (c *pipeConn) SetDeadline(t time.Time) error {
	_ = c.SetWriteDeadline(t)
	return c.SetReadDeadline(t)
}

// SetReadDeadline sets the pipe's read deadline, unless the connection is
// closed: its reads have ended.
func (c *pipeConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}
