//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

var (
	target string
	after  int64 = 1
	hits   atomic.Int64

	// sleep, when positive, is what the arrival does instead of killing.
	sleep time.Duration
)

func init() {
	spec := os.Getenv(EnvVar)
	if spec == "" {
		return
	}
	point, action, hasAction := strings.Cut(spec, ",")
	if hasAction {
		d, err := time.ParseDuration(strings.TrimPrefix(action, "sleep="))
		if !strings.HasPrefix(action, "sleep=") || err != nil || d <= 0 {
			fmt.Fprintf(os.Stderr, "failpoint: %s=%q: after ',' only sleep=DURATION (positive) is known; none armed\n", EnvVar, spec)
			return
		}
		sleep = d
	}
	name, n, found := strings.Cut(point, ":")
	if !slices.Contains(Points, name) {
		fmt.Fprintf(os.Stderr, "failpoint: %s=%q names no failpoint (known: %s); none armed\n", EnvVar, spec, strings.Join(Points, ", "))
		return
	}
	target = name
	if found {
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil || v < 1 {
			fmt.Fprintf(os.Stderr, "failpoint: %s=%q: the count after ':' must be a positive integer; none armed\n", EnvVar, spec)
			target = ""
			return
		}
		after = v
	}
}

// Inject kills the process with SIGKILL (or sleeps, when so configured)
// when name is the configured failpoint and this is its configured arrival.
func Inject(name string) {
	if name != target || hits.Add(1) != after {
		return
	}
	if sleep > 0 {
		fmt.Fprintf(os.Stderr, "failpoint: sleeping %v at %s\n", sleep, name)
		time.Sleep(sleep)
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint: killing the process at %s\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never returns
}
