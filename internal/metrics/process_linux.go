package metrics

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"strconv"
	"syscall"
)

// procSelf is the process's directory: its stat file and its fd
// directory are read at each scrape.
const procSelf = "/proc/self"

func (m *Metrics) readProc() procStats {
	var p procStats
	if st, err := readStat(m.proc + "/stat"); err == nil {
		p.cpuSeconds = float64(st.utime+st.stime) / userHZ
		p.rss = float64(st.rss) * float64(os.Getpagesize())
		p.vsize = float64(st.vsize)
		p.statOK = true
		// The start, since boot, is read once: the boot time in
		// /proc/stat is the clock less the uptime, and moves with both.
		if bits := m.startTime.Load(); bits != 0 {
			p.startTime, p.startTimeOK = math.Float64frombits(bits), true
		} else if boot, err := bootTime(); err == nil {
			p.startTime, p.startTimeOK = boot+float64(st.starttime)/userHZ, true
			m.startTime.Store(math.Float64bits(p.startTime))
		} else {
			// /proc/stat is hidden where the daemon runs with
			// ProcSubset=pid, as its unit does: the start is then
			// when the process began to run Go code, milliseconds
			// after its exec.
			p.startTime, p.startTimeOK = unixSeconds(started), true
			m.startTime.Store(math.Float64bits(p.startTime))
		}
	}
	if n, err := countFDs(m.proc + "/fd"); err == nil {
		p.openFDs, p.openFDsOK = float64(n), true
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		p.maxFDs, p.maxFDsOK = float64(rl.Cur), true
	}
	if syscall.Getrlimit(syscall.RLIMIT_AS, &rl) == nil {
		p.maxVsize, p.maxVsizeOK = float64(rl.Cur), true
	}
	return p
}

// stat is what readStat takes of proc(5)'s /proc/pid/stat.
type stat struct {
	utime, stime, starttime, vsize, rss uint64
}

var errStat = errors.New("metrics: /proc/self/stat unreadable")

// readStat reads a stat file: the fields after the command's name, which
// is in parentheses and may hold anything, spaces and parentheses too.
func readStat(path string) (stat, error) {
	var st stat
	var buf [1024]byte
	f, err := os.Open(path)
	if err != nil {
		return st, err
	}
	n, err := io.ReadFull(f, buf[:])
	f.Close()
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return st, err
	}
	b := buf[:n]
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return st, errStat
	}
	// After ") ": state (field 3), ..., utime (14), stime (15), ...,
	// starttime (22), vsize (23), rss (24).
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 22 {
		return st, errStat
	}
	for _, f := range []struct {
		field int
		to    *uint64
	}{{14, &st.utime}, {15, &st.stime}, {22, &st.starttime}, {23, &st.vsize}, {24, &st.rss}} {
		v, err := strconv.ParseUint(string(fields[f.field-3]), 10, 64)
		if err != nil {
			return st, errStat
		}
		*f.to = v
	}
	return st, nil
}

// bootTime is the btime line of /proc/stat: the boot, in seconds since
// the epoch.
func bootTime() (float64, error) {
	b, err := os.ReadFile(procStat)
	if err != nil {
		return 0, err
	}
	_, after, ok := bytes.Cut(b, []byte("\nbtime "))
	if !ok {
		return 0, errors.New("metrics: no btime in /proc/stat")
	}
	line, _, _ := bytes.Cut(after, []byte("\n"))
	v, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 10, 64)
	return float64(v), err
}

// countFDs counts the entries of dir, /proc/self/fd: the process's open
// files, the one reading them included.
func countFDs(dir string) (int, error) {
	f, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(256)
		n += len(names)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
	}
}
