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
// 404 elsewhere. At most two scrapes run at once. A scrape is written as
// it is encoded, not buffered whole (a timeout handler would: 333 KB
// grown in steps at a thousand leases); what bounds it is that Redis's
// two answers come within reply_max, and Serve's write timeout. It does
// not compress: gzip would cost
// the daemon more than the scrape itself (a compressor's 650 KB of state
// for each scrape, its pool emptied by the collections between two, and
// the deflate), to save a Prometheus on the network a few hundred
// kilobytes at a thousand leases.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(Path, promhttp.HandlerFor(m.Gatherer(), promhttp.HandlerOpts{
		MaxRequestsInFlight: 2,
		ErrorHandling:       promhttp.ContinueOnError,
		OfferedCompressions: []promhttp.Compression{promhttp.Identity},
	}))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "unitlease: metrics at %s\n", Path)
	})
	return mux
}

// Serve serves h on l, in plain HTTP, until ctx ends; a response that
// takes longer than timeout to write is cut off. The server's messages
// go to log. TLS and authentication are not built in (they
// would double the binary: see the README's Metrics section); the
// default address is loopback.
func Serve(ctx context.Context, l net.Listener, h http.Handler, timeout time.Duration, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      timeout,
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
