package testnats

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/tickflow/tickflow/embedded"
)

// Cluster is n servers from nats.conf routed into one JetStream cluster on
// loopback, in the test process.
type Cluster struct {
	Servers []*embedded.Server
}

// routePorts returns n distinct free ports for the servers' route
// listeners, from below the kernel's ephemeral range: a port drawn from that
// range could be handed meanwhile to a server's client listener (port 0) or
// to a route dial's source port, and the server whose route listener then
// fails to open never becomes ready (embedded.FreePort).
func routePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	seen := map[int]bool{}
	for len(ports) < n {
		p, err := embedded.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports
}

// StartCluster starts n servers at once and waits until their JetStream
// meta group has a leader and every peer is current.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ports := routePorts(t, n)
	routes := make([]string, n)
	for i, p := range ports {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	conf := ConfigPath(t)
	c := &Cluster{Servers: make([]*embedded.Server, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		dir := t.TempDir()
		wg.Go(func() {
			c.Servers[i], errs[i] = embedded.Start(embedded.Options{
				ConfigFile: conf, DataDir: dir, Listen: "127.0.0.1:0",
				ServerName: fmt.Sprintf("tickflow-%d", i+1), ReadyTimeout: 20 * time.Second,
				Configure: func(o *server.Options) {
					o.Cluster = server.ClusterOpts{Name: "tickflow", Host: "127.0.0.1", Port: ports[i]}
					o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
				},
				// JetStream in a cluster is ready only once the meta group is.
				SkipJetStreamCheck: true,
			})
		})
	}
	wg.Wait()
	for _, s := range c.Servers {
		if s != nil {
			watchViolations(t, s, &violationLog{})
			t.Cleanup(s.Close)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// Only the meta leader knows the peers; every server must be current.
	Eventually(t, 30*time.Second, "cluster formed", func() bool {
		leader := false
		for _, s := range c.Servers {
			if !s.JetStreamIsCurrent() {
				return false
			}
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == n {
				leader = true
			}
		}
		return leader
	})
	return c
}

// URLs lists the client URLs of the running servers, comma-separated.
func (c *Cluster) URLs() string {
	var urls []string
	for _, s := range c.Servers {
		if s.Running() {
			urls = append(urls, s.ClientURL())
		}
	}
	return strings.Join(urls, ",")
}
