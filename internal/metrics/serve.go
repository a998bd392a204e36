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
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/unitlease/unitlease/internal/securefile"
)

// Path is where the metrics are served.
const Path = "/metrics"

// CheckWebConfig reads a web configuration file (TLS and basic auth, in
// the format of Prometheus's exporter toolkit): it must be root's and
// readable by root only (it names the TLS key and holds the users'
// password hashes), and valid, with the certificates it names.
func CheckWebConfig(path string) error {
	if path == "" {
		return nil
	}
	if _, err := securefile.Read(path, true); err != nil {
		return err
	}
	if err := web.Validate(path); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

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

// Serve serves h on l until ctx ends, with TLS and basic auth as
// webConfig (a file CheckWebConfig accepts) says, or plain HTTP without
// one. The exporter toolkit's messages go to log.
func Serve(ctx context.Context, l net.Listener, h http.Handler, webConfig string, log *slog.Logger) error {
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
	noSocket := false
	addrs := []string{l.Addr().String()}
	err := web.Serve(l, srv, &web.FlagConfig{WebListenAddresses: &addrs, WebSystemdSocket: &noSocket, WebConfigFile: &webConfig}, log)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
