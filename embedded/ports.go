package embedded

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// A port picked by listening on port 0 and closing again comes from the
// kernel's ephemeral range, from which it keeps handing out ports: to every
// other port-0 listener (a nats-server's own client listener among them)
// and as the source port of every outgoing connection (route dials among
// them). A cluster's route ports must be fixed before its servers start, and
// nats-server opens its route listener last and never retries it, so such a
// port, taken meanwhile, leaves its server waiting forever for its route
// listener. Ports below the ephemeral range are handed out by nobody.

// portFloor is the lowest port FreePort returns: below the ports reserved
// for well-known services and most development servers.
const portFloor = 10000

// ephemeralFloor is the lowest ephemeral port where the kernel does not say:
// Linux's default. BSD, macOS and Windows start theirs at 49152.
const ephemeralFloor = 32768

// FreePort returns a loopback TCP port that nothing listens on now and that
// lies below the kernel's ephemeral port range, for a listener whose port
// must be known before it opens (a cluster's routes) or kept across
// restarts: no port-0 listener and no outgoing connection is given it
// meanwhile. Several calls may return the same port; a caller needing
// distinct ports compares them.
func FreePort() (int, error) {
	top := min(ephemeralStart(), ephemeralFloor)
	if top <= portFloor {
		return 0, fmt.Errorf("embedded: no ports below the ephemeral range (it starts at %d)", top)
	}
	var lastErr error
	for range 100 {
		p := portFloor + rand.IntN(top-portFloor)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			lastErr = err
			continue
		}
		if err := ln.Close(); err != nil {
			return 0, fmt.Errorf("embedded: free port %d: %w", p, err)
		}
		return p, nil
	}
	return 0, fmt.Errorf("embedded: no free port in [%d, %d): %w", portFloor, top, lastErr)
}

// ephemeralStart reads where the kernel's ephemeral range starts, or
// returns ephemeralFloor where it cannot say.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return ephemeralFloor
	}
	lo, err := parsePortRange(string(b))
	if err != nil {
		return ephemeralFloor
	}
	return lo
}

// parsePortRange reads the lower bound of "32768\t60999\n".
func parsePortRange(s string) (int, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, errors.New("embedded: port range: expected two numbers")
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo < 1 || lo > 65535 {
		return 0, fmt.Errorf("embedded: port range: %q is not a port", f[0])
	}
	return lo, nil
}
