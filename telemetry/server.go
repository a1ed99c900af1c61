package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Limits of the HTTP server: it answers three small GETs, so anything
// larger or slower than these is refused or cut off.
const (
	maxHeaderBytes    = 8 << 10
	readHeaderTimeout = 5 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	// maxScrapes bounds the /metrics requests served at once; more are
	// answered 503.
	maxScrapes = 4
	// scrapeTimeout bounds one /metrics request.
	scrapeTimeout = 15 * time.Second
	// shutdownTimeout bounds how long Run waits for requests in flight
	// once its context is done.
	shutdownTimeout = 5 * time.Second
)

// Handler serves GET (and HEAD) /metrics in the Prometheus formats,
// /healthz ("ok": the process is alive) and /readyz ("ready", or 503 and
// one line per failed check). Other paths are 404, other methods 405; the
// request's own text is never echoed or logged.
func (t *Telemetry) Handler() http.Handler {
	mux := http.NewServeMux()
	var metrics http.Handler = http.NotFoundHandler()
	if t != nil {
		metrics = promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{
			MaxRequestsInFlight: maxScrapes,
			Timeout:             scrapeTimeout,
			ErrorHandling:       promhttp.ContinueOnError,
		})
	}
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		text(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		errs := t.Ready(r.Context())
		if len(errs) == 0 {
			text(w, http.StatusOK, "ready")
			return
		}
		lines := make([]string, 0, len(errs)+1)
		lines = append(lines, "not ready")
		for _, err := range errs {
			lines = append(lines, err.Error())
		}
		text(w, http.StatusServiceUnavailable, strings.Join(lines, "\n"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics", "/healthz", "/readyz":
			w.Header().Set("Allow", "GET, HEAD")
			text(w, http.StatusMethodNotAllowed, "telemetry: only GET and HEAD are served")
		default:
			text(w, http.StatusNotFound, "telemetry: not found; the paths served are /metrics, /healthz and /readyz")
		}
	})
	return mux
}

func text(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, body)
}

// Server serves a Handler on one address.
type Server struct {
	ln  net.Listener
	srv *http.Server
	log *slog.Logger
}

// Listen listens on addr (host:port; port 0 picks a free one) for t's
// Handler; Run serves it. An address that cannot be listened on gives an
// error matching ErrListen.
func Listen(addr string, t *Telemetry, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("%w: address %q: expected host:port, e.g. 127.0.0.1:9464: %w", ErrListen, addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrListen, err)
	}
	return &Server{ln: ln, log: log, srv: &http.Server{
		Handler:           t.Handler(),
		MaxHeaderBytes:    maxHeaderBytes,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readHeaderTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}}, nil
}

// Addr is the address listened on, with the port chosen.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves until ctx is done, then stops taking connections, lets the
// requests in flight finish (at most a few seconds) and returns once every
// connection is closed.
func (s *Server) Run(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("telemetry: serve %s: %w", s.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.srv.Close()
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && serr != nil {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("telemetry: stop serving %s: %w", s.Addr(), err)
	}
	return nil
}
