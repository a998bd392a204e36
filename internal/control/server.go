package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Listen creates the control socket at path, root's only: mode 0600 in
// a directory of mode 0700. A socket left at path is replaced.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Serve answers requests on l with c until ctx ends, then closes l.
func Serve(ctx context.Context, l net.Listener, c Service) error {
	srv := &http.Server{Handler: handler(c), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func handler(c Service) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, c.Snapshot(r.Context()))
	})
	mux.HandleFunc("POST /handoff", func(w http.ResponseWriter, r *http.Request) {
		res, err := c.Handoff(r.Context(), r.URL.Query().Get("target"))
		if err != nil {
			reply(w, http.StatusConflict, errorBody{err.Error()})
			return
		}
		reply(w, http.StatusOK, res)
	})
	mux.HandleFunc("GET /guard", func(w http.ResponseWriter, r *http.Request) {
		if err := c.Guard(r.URL.Query().Get("unit")); err != nil {
			reply(w, http.StatusForbidden, errorBody{err.Error()})
			return
		}
		reply(w, http.StatusOK, struct{}{})
	})
	return mux
}

type errorBody struct {
	Error string `json:"error"`
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
