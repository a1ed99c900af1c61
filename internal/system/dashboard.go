package system

import (
	"context"
	"log/slog"
	"net"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/dashboard"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/streams"
)

// dashboardRun returns the run of the dashboard on ln. Each login dials
// the server as the user logging in, over TCP where the server listens (a
// refused login then ends at once) and in-process otherwise. publicURL and
// hosts are dashboard.Config.PublicURL and Hosts.
func dashboardRun(srv *embedded.Server, ln net.Listener, publicURL string, hosts []string, log *slog.Logger) (func(context.Context) error, error) {
	d, err := dashboard.New(dashboard.Config{
		Logger: log, PublicURL: publicURL, Hosts: hosts,
		Dial: func(user, password string) (*nats.Conn, error) {
			c := streams.Credentials{URL: srv.URL(), User: user, Password: password, Name: "dashboard-" + user}
			if c.URL == "" {
				return streams.Connect(c, srv.InProcess())
			}
			return streams.Connect(c)
		},
	})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return d.Serve(ctx, ln) }, nil
}
