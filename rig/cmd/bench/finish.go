package main

// The end of a run: the goals evaluated, the machine described, the table
// printed and the outputs written.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// finish evaluates the goals, collects machine facts, prints the table and
// writes the outputs.
func (b *bench) finish() {
	b.rep.Goals = b.goals()
	b.rep.GoalsByKey = map[string]Goal{}
	for _, g := range b.rep.Goals {
		b.rep.GoalsByKey[g.Key] = g
	}
	b.rep.Machine = b.machine(b.rep.Machine)
	b.rep.TotalSeconds = round1(time.Since(b.start).Seconds())
	b.rep.buildTable()
	fmt.Println()
	fmt.Println(b.rep.Machine.Description)
	fmt.Println()
	fmt.Print(b.rep.Text())
	fmt.Println("\nPhase durations:")
	for _, p := range b.rep.Phases {
		fmt.Printf("  %-72s %6.1fs\n", p.Name, p.Seconds)
	}
	fmt.Printf("  %-72s %6.1fs\n", "total", b.rep.TotalSeconds)
	paths, err := b.rep.write(b.o.out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: writing results:", err)
		return
	}
	png := filepath.Join(b.o.out, "bench.png")
	if err := writeChart(png, &b.rep); err != nil {
		fmt.Fprintln(os.Stderr, "bench: writing chart:", err)
	} else {
		paths = append(paths, png)
	}
	fmt.Println("\nWrote:", strings.Join(paths, " "))
}

func (b *bench) machine(m Machine) Machine {
	m.Date = b.start.UTC().Format(time.RFC3339)
	m.NProc = runtime.NumCPU()
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	m.GoVersion = runtime.Version()
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.GoVersion = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("git", "-C", b.root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "-C", b.root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			m.Commit += " (with uncommitted changes)"
		}
	}
	for _, t := range b.targets {
		if t.svc != nil {
			if fi, err := os.Stat(t.svc.logPath); err == nil {
				m.ServiceLog += fmt.Sprintf("%s: %d ", t.name, fi.Size())
			}
		}
	}
	pg := m.PostgreSQL
	if i := strings.Index(pg, " on "); i > 0 {
		pg = pg[:i]
	}
	mode := "full run"
	if b.o.quick {
		mode = "QUICK smoke run (short phases, small history): not for comparison"
	}
	speed := ""
	if m.SpeedStart != nil {
		speed = fmt.Sprintf("; speed at the start: HMAC %.0f ns, PostgreSQL sum %.1f ms", m.SpeedStart.GoNs, m.SpeedStart.PGMs)
	}
	m.Description = fmt.Sprintf("%s — %s; nproc %d (%s); %s durable (fsync on, synchronous_commit on); %s; commit %s; fulfillmentd max_conns %d, default workers; generator on the same machine%s",
		m.Date, mode, m.NProc, m.CPUModel, pg, m.GoVersion, m.Commit, b.o.maxConns, speed)
	return m
}
