package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where the metrics are served.
const Path = "/metrics"

// Listen binds the endpoint's address, so that a bad one stops the
// daemon before it starts.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return l, nil
}

// Handler serves m's registry at Path, a line pointing there at /, and
// 404 elsewhere. At most two scrapes run at once; one that takes longer
// than timeout is answered 503.
func (m *Metrics) Handler(timeout time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(Path, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		MaxRequestsInFlight: 2,
		Timeout:             timeout,
		ErrorHandling:       promhttp.ContinueOnError,
	}))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "unitlease: metrics at %s\n", Path)
	})
	return mux
}

// Serve serves h on l, in plain HTTP, until ctx ends; the server's
// messages go to log. TLS and authentication are not built in (they
// would double the binary: see the README's Metrics section); the
// default address is loopback.
func Serve(ctx context.Context, l net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	defer stop()
	log.Info("metrics at http://" + l.Addr().String() + Path)
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
