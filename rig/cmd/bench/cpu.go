package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTicks = 100

// cpuMeter reads, from /proc, how much CPU the service, the PostgreSQL
// server (postmaster, its live backends, and the backends it has reaped) and
// this process (the load generator) have used, to tell what a phase spent
// its two cores on.
type cpuMeter struct {
	servicePID    int
	postmasterPID int
}

type cpuSample struct {
	at                          time.Time
	service, postgres, generate float64 // CPU seconds
	machine                     float64 // busy CPU seconds of the whole machine
}

// CPUShare is the average number of cores each party used over a run.
// Other is everything else the machine ran meanwhile (other engineers'
// builds and tests on a shared machine): the noise indicator.
type CPUShare struct {
	Service   float64 `json:"service_cores"`
	Postgres  float64 `json:"postgres_cores"`
	Generator float64 `json:"generator_cores"`
	Other     float64 `json:"other_cores"`
}

func (s CPUShare) String() string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }
	return f(s.Service) + "/" + f(s.Postgres) + "/" + f(s.Generator) + "/" + f(s.Other)
}

func (m *cpuMeter) sample() cpuSample {
	s := cpuSample{at: time.Now(), generate: procTimes(os.Getpid(), false), machine: machineBusy()}
	if m == nil {
		return s
	}
	if m.servicePID > 0 {
		s.service = procTimes(m.servicePID, true)
	}
	if m.postmasterPID > 0 {
		s.postgres = procTimes(m.postmasterPID, true)
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if ppid, ok := parentOf(pid); ok && ppid == m.postmasterPID {
				s.postgres += procTimes(pid, true)
			}
		}
	}
	return s
}

func (m *cpuMeter) since(a cpuSample) CPUShare {
	b := m.sample()
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return CPUShare{}
	}
	r := func(x float64) float64 { return float64(int(x/wall*100+0.5)) / 100 }
	sh := CPUShare{Service: r(b.service - a.service), Postgres: r(b.postgres - a.postgres), Generator: r(b.generate - a.generate)}
	sh.Other = max(r(b.machine-a.machine)-sh.Service-sh.Postgres-sh.Generator, 0)
	sh.Other = float64(int(sh.Other*100+0.5)) / 100
	return sh
}

// machineBusy is the machine's non-idle CPU time in seconds, from the
// first line of /proc/stat (user nice system idle iowait irq softirq steal).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return float64(busy) / clockTicks
}

// statFields returns the fields of /proc/PID/stat after the command name.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// procTimes returns utime+stime (and, with children, the reaped children's
// cutime+cstime) of pid in seconds; 0 when it is gone.
func procTimes(pid int, children bool) float64 {
	f := statFields(pid)
	// After ")": state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	last := 12
	if children {
		last = 14
	}
	for i := 11; i <= last; i++ {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return float64(ticks) / clockTicks
}

func parentOf(pid int) (int, bool) {
	f := statFields(pid)
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// postmasterPID reads the first line of DATA/postmaster.pid.
func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}
