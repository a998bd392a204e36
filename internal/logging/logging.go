// Package logging sets up slog: to the systemd journal, with structured
// fields, when its socket exists, and as text on stderr otherwise. It
// names the journal's UNITLEASE_* fields, and imports nothing of
// unitlease.
package logging

import (
	"io"
	"log/slog"
	"os"
	"strings"

	slogjournal "github.com/systemd/slog-journal"
)

// The journal fields (unitlease(8), section JOURNAL).
const (
	Event   = "UNITLEASE_EVENT"
	Lease   = "UNITLEASE_LEASE"
	Unit    = "UNITLEASE_UNIT"
	Node    = "UNITLEASE_NODE"
	Holder  = "UNITLEASE_HOLDER"
	Version = "UNITLEASE_VERSION"
)

// JournalSocket is where journald listens for native messages.
const JournalSocket = "/run/systemd/journal/socket"

// New returns the logger the daemon and CLI use. Attribute keys become
// journal field names (upper case, '-' and '.' as '_').
func New(level slog.Leveler) *slog.Logger {
	if _, err := os.Stat(JournalSocket); err == nil {
		h, err := slogjournal.NewHandler(&slogjournal.Options{Level: level, ReplaceAttr: journalKey, ReplaceGroup: fieldName})
		if err == nil {
			return slog.New(h)
		}
	}
	return Text(os.Stderr, level)
}

// Text logs as text to w, for a terminal or a test.
func Text(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

func journalKey(_ []string, a slog.Attr) slog.Attr {
	a.Key = fieldName(a.Key)
	return a
}

// fieldName turns a key into a journal field name: ^[A-Z_][A-Z0-9_]*$.
func fieldName(k string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			return r
		}
		return '_'
	}, k)
}

// UnitFields is one Unit field per unit of a group, to append to an
// entry's attributes: the journal keeps them all, so
// `journalctl UNITLEASE_UNIT=db.service` finds an entry of db.service's
// group.
func UnitFields(units []string) []any {
	f := make([]any, 0, 2*len(units)+12)
	for _, u := range units {
		f = append(f, Unit, u)
	}
	return f
}
