package redislease

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// LogTo sends go-redis's own messages (failed dials, pool trouble) to
// log, for the whole process, instead of straight to stderr: a write to
// stderr under systemd waits on journald, and go-redis writes them on the
// goroutines that dial, so a journal that stopped reading would hold the
// store's connections back.
func LogTo(log *slog.Logger) { redis.SetLogger(redisLogger{log}) }

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
