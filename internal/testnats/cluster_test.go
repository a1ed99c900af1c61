package testnats_test

import (
	"fmt"
	"testing"

	"github.com/tickflow/tickflow/internal/testnats"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

// TestStartClusterRepeatedly starts a three-node cluster, its nodes at the
// same moment, several times in a row. Its route ports lie below the
// kernel's ephemeral range, where neither a node's own port-0 client
// listener nor a route dial's source port can take them before the node
// opens its route listener (which made a node wait forever).
func TestStartClusterRepeatedly(t *testing.T) {
	for i := range 5 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			c := testnats.StartCluster(t, 3)
			for _, s := range c.Servers {
				addr := s.ClusterAddr()
				if addr == nil {
					t.Fatalf("%s has no route listener", s.Name())
				}
				if addr.Port >= 32768 {
					t.Fatalf("%s routes on port %d, inside the ephemeral range (32768 and up): a port-0 listener or an outgoing connection may take it first", s.Name(), addr.Port)
				}
			}
		})
	}
}
