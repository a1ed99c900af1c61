package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/streams"
)

// clusterNodes is the size of the cluster phase's cluster: the smallest
// that keeps an R3 quorum through the loss of a node.
const clusterNodes = 3

// startClusterEnv starts nodes servers from nats.conf, each on its own
// store and a loopback port, routed into one JetStream cluster, waits until
// the meta group has a leader and every peer is current, and provisions
// the bench domain with every stream and bucket replicated on every node.
// Roles connect over TCP to the node nodeOf names.
func startClusterEnv(cfg *config, nodes int) (*env, error) {
	dir, err := os.MkdirTemp(cfg.tmpDir, "tickflow-bench-cluster-")
	if err != nil {
		return nil, err
	}
	routes := make([]string, nodes)
	ports := make([]int, nodes)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i])
	}
	var srvs []*embedded.Server
	fail := func(err error) (*env, error) {
		for _, s := range srvs {
			s.Close()
		}
		_ = os.RemoveAll(dir)
		return nil, err
	}
	for i := range nodes {
		s, err := embedded.Start(embedded.Options{
			ConfigFile: cfg.natsConf, DataDir: filepath.Join(dir, fmt.Sprintf("node-%d", i+1)), Listen: "127.0.0.1:0",
			ServerName: fmt.Sprintf("bench-%d", i+1), ReadyTimeout: 20 * time.Second,
			Configure: func(o *server.Options) {
				o.Cluster = server.ClusterOpts{Name: "tickflow-bench", Host: "127.0.0.1", Port: ports[i]}
				o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
			},
			// A clustered server's JetStream is ready only once its peers are.
			SkipJetStreamCheck: true,
		})
		if err != nil {
			return fail(fmt.Errorf("cluster node %d: %w", i+1, err))
		}
		srvs = append(srvs, s)
	}
	if err := waitClusterFormed(srvs, 30*time.Second); err != nil {
		return fail(err)
	}
	settings := streams.DefaultSettings()
	settings.Replicas = nodes
	e, err := newEnv(cfg, dir, srvs[0], srvs, settings)
	if err != nil {
		return nil, err
	}
	if err := e.checkReplicated(nodes); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// checkReplicated verifies that a queue stream and a bucket's stream have
// a leader and nodes-1 followers, so the cluster phase measures what it
// says.
func (e *env) checkReplicated(nodes int) error {
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	for _, name := range []string{streams.StreamHigh, "KV_" + streams.BucketBatches} {
		s, err := e.adminJS.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("cluster: stream %s: %w", name, err)
		}
		ci := s.CachedInfo()
		if ci.Config.Replicas != nodes || ci.Cluster == nil || len(ci.Cluster.Replicas) != nodes-1 {
			return fmt.Errorf("cluster: stream %s is not replicated on %d nodes (replicas %d, cluster %+v)", name, nodes, ci.Config.Replicas, ci.Cluster)
		}
	}
	return nil
}

// waitClusterFormed polls until every node's JetStream is current and the
// meta leader (the only node that knows the peers) sees all of them.
func waitClusterFormed(srvs []*embedded.Server, timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		current, leader := true, false
		for _, s := range srvs {
			current = current && s.JetStreamIsCurrent()
			leader = leader || (s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == len(srvs))
		}
		if current && leader {
			return nil
		}
	}
	return fmt.Errorf("cluster of %d nodes did not form within %s", len(srvs), timeout)
}

// freePort returns a loopback port nobody listens on right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("cluster: listener without a TCP address")
	}
	return addr.Port, nil
}

// clusterResult is one repetition of the cluster phase: the same burn-down
// on one server and on the cluster, back to back.
type clusterResult struct {
	single, cluster burnResult
}

// runClusterRep runs the burn-down of the cluster phase on one server and
// then on a cluster of clusterNodes nodes with R3 streams and buckets, the
// roles spread over the nodes (nodeOf), with the fixed phases' replicas.
func runClusterRep(cfg *config) (clusterResult, error) {
	var r clusterResult
	var err error
	o := burnOptions{spec: cfg.spec(), label: labelAtomic, functions: 1, n: cfg.clusterN, units: 1}
	if r.single, err = runBurnDown(cfg, o); err != nil {
		return r, fmt.Errorf("single node: %w", err)
	}
	o.spec.nodes = clusterNodes
	if r.cluster, err = runBurnDown(cfg, o); err != nil {
		return r, fmt.Errorf("%d-node cluster: %w", clusterNodes, err)
	}
	return r, nil
}
