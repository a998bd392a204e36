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
// a directory of mode 0700 (enforced on a directory that exists). A
// socket left at path is replaced. It admits connections from root only
// (the kernel's peer credentials), MaxConns at once.
func Listen(path string) (net.Listener, error) {
	if err := secureDir(filepath.Dir(path)); err != nil {
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
	return &rootOnly{Listener: l, slots: make(chan struct{}, MaxConns)}, nil
}

// Limits of a request: its names are unit or lease names, its headers
// small; a connection that sends nothing is closed.
const (
	maxName        = 256
	maxHeaderBytes = 8 << 10
)

// Serve answers requests on l with c until ctx ends, then closes l.
func Serve(ctx context.Context, l net.Listener, c Service) error {
	srv := &http.Server{Handler: handler(c), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second,
		IdleTimeout: 10 * time.Second, MaxHeaderBytes: maxHeaderBytes, ConnContext: connContext}
	// One request per connection: a client polling status every second
	// would otherwise hold its slot for good, and MaxConns of them would
	// keep the guard of every unit start waiting.
	srv.SetKeepAlivesEnabled(false)
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
		target, ok := name(w, r, "target")
		if !ok {
			return
		}
		to, ok := name(w, r, "to")
		if !ok {
			return
		}
		res, err := c.Handoff(r.Context(), target, to)
		if err != nil {
			reply(w, http.StatusConflict, errorBody{err.Error()})
			return
		}
		reply(w, http.StatusOK, res)
	})
	mux.HandleFunc("POST /drain", func(w http.ResponseWriter, r *http.Request) {
		res, err := c.Drain(r.Context(), r.URL.Query().Get("stop") == "1")
		if err != nil {
			reply(w, http.StatusConflict, errorBody{err.Error()})
			return
		}
		reply(w, http.StatusOK, res)
	})
	mux.HandleFunc("POST /undrain", func(w http.ResponseWriter, r *http.Request) {
		res, err := c.Undrain(r.Context())
		if err != nil {
			reply(w, http.StatusConflict, errorBody{err.Error()})
			return
		}
		reply(w, http.StatusOK, res)
	})
	mux.HandleFunc("GET /guard", func(w http.ResponseWriter, r *http.Request) {
		unit, ok := name(w, r, "unit")
		if !ok {
			return
		}
		if err := c.Guard(r.Context(), unit); err != nil {
			reply(w, http.StatusForbidden, errorBody{err.Error()})
			return
		}
		reply(w, http.StatusOK, struct{}{})
	})
	return mux
}

// name is the request's parameter key, refused (400) when it is longer
// than any unit or lease name can be: an error never echoes it.
func name(w http.ResponseWriter, r *http.Request, key string) (string, bool) {
	v := r.URL.Query().Get(key)
	if len(v) > maxName {
		reply(w, http.StatusBadRequest, errorBody{fmt.Sprintf("%s is %d bytes, longer than any name (%d)", key, len(v), maxName)})
		return "", false
	}
	return v, true
}

type errorBody struct {
	Error string `json:"error"`
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
