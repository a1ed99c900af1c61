package embedded

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// pipePair is a pipeConn over one end of a net.Pipe, and the other end,
// which the test reads as the server would.
func pipePair(t *testing.T, limit int, flushFor time.Duration) (*pipeConn, net.Conn) {
	t.Helper()
	client, server := net.Pipe()
	c := newPipeConn(client)
	c.limit, c.flushFor = limit, flushFor
	t.Cleanup(func() {
		_ = c.Close()
		_ = server.Close()
		<-c.done
	})
	return c, server
}

// readN reads n bytes from r, or fails the test.
func readN(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

// TestPipeConnWriteReturnsBeforeTheServerReads: a write returns while
// nothing reads the other end, up to the buffer's bound; the bytes then
// arrive whole and in order.
func TestPipeConnWriteReturnsBeforeTheServerReads(t *testing.T) {
	c, server := pipePair(t, 1<<10, time.Second)
	var want bytes.Buffer
	for i := range 8 {
		p := bytes.Repeat([]byte{byte('a' + i)}, 100)
		want.Write(p)
		if n, err := c.Write(p); n != len(p) || err != nil {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	if got := readN(t, server, want.Len()); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("the server read %q, want %q", got, want.Bytes())
	}
}

// TestPipeConnWaitsWhenFull: a write that would pass the bound waits until
// the server has read what is pending, and a write deadline ends that
// wait.
func TestPipeConnWaitsWhenFull(t *testing.T) {
	c, server := pipePair(t, 100, time.Second)
	if _, err := c.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	// The pump may hold those 100 bytes in its pipe write, which waits for
	// the server, or still have them pending: either way, 100 more fill
	// the buffer, and the next write waits.
	if _, err := c.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Write([]byte{1}); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a write to a full buffer past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(bytes.Repeat([]byte{7}, 50))
		wrote <- err
	}()
	readN(t, server, 200)
	if err := <-wrote; err != nil {
		t.Fatalf("the waiting write, once the server read: %v", err)
	}
	if got := readN(t, server, 50); !bytes.Equal(got, bytes.Repeat([]byte{7}, 50)) {
		t.Fatalf("read %v", got)
	}
}

// TestPipeConnCloseHandsWhatWasWritten: Close returns at once, and what was
// written before it still reaches the server, as a socket's close sends
// its buffer; then the pipe closes.
func TestPipeConnCloseHandsWhatWasWritten(t *testing.T) {
	c, server := pipePair(t, 1<<10, 10*time.Second)
	if _, err := c.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a write after Close: %v, want net.ErrClosed", err)
	}
	if got := readN(t, server, len("last words")); string(got) != "last words" {
		t.Fatalf("read %q", got)
	}
	if _, err := server.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last bytes the server's end reads %v, want io.EOF", err)
	}
	<-c.done
}

// TestPipeConnCloseGivesUpOnAServerThatDoesNotRead: the pending bytes are
// handed for at most flushFor; then the pipe closes and the pump ends.
func TestPipeConnCloseGivesUpOnAServerThatDoesNotRead(t *testing.T) {
	c, _ := pipePair(t, 1<<10, 20*time.Millisecond)
	if _, err := c.Write([]byte("never read")); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the pump still waits on a server that does not read, long after flushFor")
	}
}

// TestPipeConnReportsAFailedPipe: once the pipe fails (the server closed
// its end), writes return that error.
func TestPipeConnReportsAFailedPipe(t *testing.T) {
	c, server := pipePair(t, 1<<10, time.Second)
	_ = server.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Write([]byte("x"))
		if errors.Is(err, io.ErrClosedPipe) {
			return
		}
		if err != nil {
			t.Fatalf("write to a closed pipe: %v, want io.ErrClosedPipe", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("writes to a pipe whose server end is closed still succeed")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPipeConnCloseEndsARead: a read waiting on the server ends at Close
// with net.ErrClosed, as on a closed socket, while what was written before
// still reaches the server.
func TestPipeConnCloseEndsARead(t *testing.T) {
	c, server := pipePair(t, 1<<10, 10*time.Second)
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	if _, err := c.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	select {
	case err := <-read:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a read ended by Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read still waits after Close")
	}
	if got := readN(t, server, 3); string(got) != "bye" {
		t.Fatalf("read %q", got)
	}
}
