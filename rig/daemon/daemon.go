// Package daemon runs a fulfillmentd binary as a child process: for crash
// tests, the chaos run and benchmarks. It builds the binary, picks free
// loopback ports for it, starts it so that it dies with its parent, waits
// until it serves, and stops or kills it.
//
// WriteConfig writes a child's configuration from a config.Config, so that
// crash tests, chaos and bench share one way of writing it.
package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// ModuleRoot is the folder of the go.mod of the module the go command is
// run in.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("running go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("finding the module root: go env GOMOD: not inside a module")
	}
	return filepath.Dir(gomod), nil
}

// Build compiles ./cmd/fulfillmentd of the module in root into the file
// out, with the build tags tags. The compiler's output is in the error.
func Build(ctx context.Context, root, out string, tags ...string) error {
	args := []string{"build"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "-o", out, "./cmd/fulfillmentd")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("running go %s: %w\n%s", strings.Join(args, " "), err, msg)
	}
	return nil
}

// ChildEnv is this process's environment without anything that would
// configure fulfillmentd behind the caller's back (DATABASE_URL, DATABASE_SESSION_URL and every
// FULFILLMENT_* variable), followed by extra.
func ChildEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "DATABASE_URL=") || strings.HasPrefix(kv, "DATABASE_SESSION_URL=") || strings.HasPrefix(kv, "FULFILLMENT_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// FreeAddrs returns n distinct loopback addresses that were free a moment
// ago, their ports chosen by the kernel.
func FreeAddrs(n int) ([]string, error) {
	addrs := make([]string, 0, n)
	lis := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range lis {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("picking a free loopback port: %w", err)
		}
		lis = append(lis, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// FreeAddrsOutsideEphemeral returns n distinct loopback addresses, free
// now, whose ports lie outside the kernel's ephemeral range: a client
// connection (the caller's, or fulfillmentd's own to PostgreSQL) can then
// never take one as its source port while the process that listens on it
// is down, so the same ports serve successive processes.
func FreeAddrsOutsideEphemeral(n int) ([]string, error) {
	// Candidates: below the ephemeral range, else above it, else anywhere.
	first, last := 1024, 65535
	switch lo, hi := ephemeralRange(); {
	case lo-first >= 5000:
		first, last = max(first, lo-22000), lo-1
	case last-hi >= 5000:
		first = hi + 1
	}
	var addrs []string
	seen := map[int]bool{}
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 2000 {
			return nil, errors.New("picking a free loopback port: none found")
		}
		port := first + rand.IntN(last-first+1)
		if seen[port] {
			continue
		}
		seen[port] = true
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = l.Close()
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// ephemeralRange is the kernel's range of automatically assigned ports.
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) == 2 {
		l, err1 := strconv.Atoi(f[0])
		h, err2 := strconv.Atoi(f[1])
		if err1 == nil && err2 == nil {
			return l, h
		}
	}
	return lo, hi
}

// Tail is the last n bytes of s, marked with a leading ellipsis when cut.
func Tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// FileTail is the last n bytes of the file at path, or "" when it cannot
// be read.
func FileTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	buf := make([]byte, fi.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}

// Buffer collects a child's output in memory: the child's output is
// written from exec's goroutine while the caller reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail is the last n bytes written.
func (b *Buffer) Tail(n int) string { return Tail(b.String(), n) }

var _ io.Writer = (*Buffer)(nil)
