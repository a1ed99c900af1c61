package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/streams"
)

// clusterName names the chaos suite's clusters.
const clusterName = "chaos"

// Server is one nats-server process with its fixed ports and store, so a
// restart comes back where it was.
type Server struct {
	*Proc
	// ServerName is the server's name in the cluster.
	ServerName string
	// Port is the client port; ClusterPort the route port (0 alone).
	Port, ClusterPort int
	// StoreDir is the JetStream store directory.
	StoreDir string
}

// URL is the server's client URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.Port) }

// distinctPorts returns n distinct free ports below the ephemeral range,
// which a restarted server can take again.
func distinctPorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for len(out) < n {
		p, err := embedded.FreePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// newServers writes the config of n servers into dir, each including the
// repository's nats.conf (users and permissions) and overriding its name,
// listen address, store and, for n > 1, its cluster.
func newServers(dir, natsConf, bin string, n int, j *Journal) ([]*Server, error) {
	base, err := os.ReadFile(natsConf)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), base, 0o644); err != nil {
		return nil, err
	}
	ports, err := distinctPorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	var out []*Server
	for i := range n {
		s := &Server{ServerName: fmt.Sprintf("chaos-%d", i+1), Port: ports[i], StoreDir: filepath.Join(dir, fmt.Sprintf("store-%d", i+1))}
		var conf strings.Builder
		fmt.Fprintf(&conf, "include \"nats.conf\"\nserver_name: %s\nlisten: 127.0.0.1:%d\n", s.ServerName, s.Port)
		fmt.Fprintf(&conf, "jetstream { store_dir: %q, max_memory_store: 256MB, max_file_store: 4GB }\n", s.StoreDir)
		if n > 1 {
			s.ClusterPort = ports[n+i]
			fmt.Fprintf(&conf, "cluster { name: %s, listen: 127.0.0.1:%d, routes: [%s] }\n", clusterName, s.ClusterPort, strings.Join(routes, ", "))
		}
		path := filepath.Join(dir, s.ServerName+".conf")
		if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
			return nil, err
		}
		s.Proc = newProc(s.ServerName, KindServer, bin, []string{"-c", path}, childEnv(), filepath.Join(dir, s.ServerName+".log"), j)
		out = append(out, s)
	}
	return out, nil
}

// waitJetStream waits until JetStream answers through nc: on a cluster,
// once its meta group has a leader.
func waitJetStream(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return retryUntil(ctx, "jetstream", 2*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		return err
	})
}

// provision creates every resource for the domain, and the consumer
// that keeps every callback for the checker, retrying while a
// cluster's peers are still catching up.
func provision(ctx context.Context, nc *nats.Conn, s streams.Settings, domain string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// The checker reads every callback at the end of the run: a consumer
	// that never acknowledges keeps them, which a deployment has not.
	return retryUntil(ctx, "provision", 10*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		if err := streams.Provision(ctx, js, s, domain); err != nil {
			return err
		}
		return streams.KeepCallbacks(ctx, js, s)
	})
}

// retryUntil calls f, each call bounded by per, pausing between failures,
// until it succeeds or ctx ends; then the error names what and the last
// failure.
func retryUntil(ctx context.Context, what string, per, pause time.Duration, f func(context.Context) error) error {
	var last error
	for {
		fctx, cancel := context.WithTimeout(ctx, per)
		err := f(fctx)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s: %w", ErrNotReady, what, errors.Join(ctx.Err(), last))
		case <-time.After(pause):
		}
	}
}

// streamLeader names the server leading stream, as its info says.
func streamLeader(ctx context.Context, nc *nats.Conn, stream string) (string, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := js.Stream(ictx, stream)
	if err != nil {
		return "", err
	}
	ci := st.CachedInfo()
	if ci.Cluster == nil || ci.Cluster.Leader == "" {
		return "", fmt.Errorf("chaos: stream %s has no leader", stream)
	}
	return ci.Cluster.Leader, nil
}
