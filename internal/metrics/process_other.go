//go:build !linux

package metrics

// procSelf is unused off Linux: the process's series are not served.
const procSelf = ""

type procStats struct {
	cpuSeconds, rss, vsize float64
	statOK                 bool
	startTime              float64
	startTimeOK            bool
	openFDs                float64
	openFDsOK              bool
	maxFDs                 float64
	maxFDsOK               bool
	maxVsize               float64
	maxVsizeOK             bool
}

func (m *Metrics) readProc() procStats { return procStats{} }
