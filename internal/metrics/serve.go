package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
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

// Handler serves m's series (WriteTo) at Path, a line pointing there
// at /, and 404 elsewhere. At most two scrapes run at once; a third gets
// 503, as the client library's handler does it. A scrape is in the text
// format (version 0.0.4, which every Prometheus
// reads) whatever the scraper offers, and written as it is encoded, 16
// KB at a time, not buffered whole: what bounds it is that Redis's two
// answers come within reply_max, and Serve's write timeout. It does not
// compress: gzip would cost the daemon more than the scrape itself (a
// compressor's 650 KB of state for each scrape, its pool emptied by the
// collections between two, and the deflate), to save a Prometheus on the
// network a few hundred kilobytes at a thousand leases.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(Path, &scrapeHandler{m: m, inFlight: make(chan struct{}, 2)})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "unitlease: metrics at %s\n", Path)
	})
	return mux
}

// textFormat is the Content-Type of a scrape, as the client library's
// handler writes it for the text format.
const textFormat = "text/plain; version=0.0.4; charset=utf-8"

type scrapeHandler struct {
	m        *Metrics
	inFlight chan struct{}
}

func (h *scrapeHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	select {
	case h.inFlight <- struct{}{}:
		defer func() { <-h.inFlight }()
	default:
		http.Error(w, "unitlease: two scrapes are running already", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", textFormat)
	_, _ = h.m.WriteTo(w) // a scraper gone is no error of the daemon's
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
