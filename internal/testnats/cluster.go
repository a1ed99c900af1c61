package testnats

import (
	"fmt"
	"net"
	"strings"
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

// freePort returns a loopback port nobody listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// StartCluster starts n servers and waits until their JetStream meta group
// has a leader and every peer is current.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range ports {
		ports[i] = freePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i])
	}
	c := &Cluster{}
	for i := range n {
		s, err := embedded.Start(embedded.Options{
			ConfigFile: ConfigPath(t), DataDir: t.TempDir(), Listen: "127.0.0.1:0",
			ServerName: fmt.Sprintf("tickflow-%d", i+1), ReadyTimeout: 20 * time.Second,
			Configure: func(o *server.Options) {
				o.Cluster = server.ClusterOpts{Name: "tickflow", Host: "127.0.0.1", Port: ports[i]}
				o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
			},
			// JetStream in a cluster is ready only once the meta group is.
			SkipJetStreamCheck: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		c.Servers = append(c.Servers, s)
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
