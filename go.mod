module github.com/unitlease/unitlease

go 1.26.0

require (
	github.com/coreos/go-systemd/v22 v22.7.0
	github.com/godbus/dbus/v5 v5.2.4
	github.com/pelletier/go-toml/v2 v2.4.3
	github.com/redis/go-redis/v9 v9.23.0
	github.com/systemd/slog-journal v0.1.2
	golang.org/x/sys v0.48.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
)
