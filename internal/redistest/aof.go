package redistest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// An AOF mark is a place in the server's append-only file (the last
// incremental file of Redis 7's appendonlydir) between two commands,
// outside any MULTI/EXEC block: what survives of it when the server
// crashes before the writes after it reach the disk (appendfsync
// everysec loses up to a second of them).
type AOFMark int64

// incrAOF is the path of the last incremental AOF file.
func (s *Server) incrAOF() (string, error) {
	files, err := filepath.Glob(filepath.Join(s.Dir, "appendonlydir", "*.incr.aof"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("redistest: no incremental AOF in %s (appendonly off?): %v", s.Dir, err)
	}
	last, lastN := "", -1
	for _, f := range files {
		parts := strings.Split(filepath.Base(f), ".")
		if len(parts) < 4 {
			continue
		}
		if n, err := strconv.Atoi(parts[len(parts)-3]); err == nil && n > lastN {
			last, lastN = f, n
		}
	}
	return last, nil
}

// AOFCommands reads the AOF's commands, each with the mark after it
// (within MULTI/EXEC, the mark after the EXEC).
func (s *Server) AOFCommands() (cmds [][]string, marks []AOFMark) {
	s.t.Helper()
	path, err := s.incrAOF()
	if err != nil {
		s.t.Fatalf("%v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
	r := bufio.NewReader(bytes.NewReader(data))
	var off int64
	open := -1 // the first command of an open MULTI block
	for {
		args, n, err := readCommand(r)
		if err == io.EOF {
			break
		}
		if err != nil { // a torn tail, as Redis itself tolerates
			break
		}
		off += n
		name := strings.ToUpper(args[0])
		switch {
		case name == "MULTI":
			open = len(cmds)
		case name == "EXEC" && open >= 0:
			for i := open; i < len(cmds); i++ {
				marks[i] = AOFMark(off)
			}
			open = -1
		default:
			cmds, marks = append(cmds, args), append(marks, AOFMark(off))
		}
	}
	if open >= 0 { // a block the crash cut short: none of it survives
		cmds, marks = cmds[:open], marks[:open]
	}
	return cmds, marks
}

// AOFEnd is the mark after the last command written so far.
func (s *Server) AOFEnd() AOFMark {
	s.t.Helper()
	path, err := s.incrAOF()
	if err != nil {
		s.t.Fatalf("%v", err)
	}
	_, marks := s.AOFCommands()
	if len(marks) == 0 {
		st, err := os.Stat(path)
		if err != nil {
			s.t.Fatalf("redistest: %v", err)
		}
		return AOFMark(st.Size())
	}
	return marks[len(marks)-1]
}

// CrashBackTo crashes the server (SIGKILL), cuts its AOF back to mark,
// as if every write after it had never reached the disk, and starts it
// again: a restart that lost its last writes.
func (s *Server) CrashBackTo(mark AOFMark) {
	s.t.Helper()
	s.Stop()
	path, err := s.incrAOF()
	if err != nil {
		s.t.Fatalf("%v", err)
	}
	if err := os.Truncate(path, int64(mark)); err != nil {
		s.t.Fatalf("redistest: cut the AOF back: %v", err)
	}
	s.start()
}

// readCommand reads one RESP array of bulk strings and its length in
// bytes.
func readCommand(r *bufio.Reader) ([]string, int64, error) {
	var n int64
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, 0, err
	}
	n += int64(len(line))
	if !strings.HasPrefix(line, "*") {
		return nil, 0, fmt.Errorf("redistest: AOF: want an array, got %q", line)
	}
	count, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || count < 1 {
		return nil, 0, fmt.Errorf("redistest: AOF: bad array header %q", line)
	}
	args := make([]string, 0, count)
	for range count {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, 0, io.ErrUnexpectedEOF
		}
		n += int64(len(h))
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(h, "$")))
		if !strings.HasPrefix(h, "$") || err != nil || size < 0 {
			return nil, 0, fmt.Errorf("redistest: AOF: bad bulk header %q", h)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, 0, io.ErrUnexpectedEOF
		}
		n += int64(size + 2)
		args = append(args, string(buf[:size]))
	}
	return args, n, nil
}
