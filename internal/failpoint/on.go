//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

var (
	target string
	after  int64 = 1
	hits   atomic.Int64
)

func init() {
	spec := os.Getenv(EnvVar)
	if spec == "" {
		return
	}
	name, n, found := strings.Cut(spec, ":")
	target = name
	if found {
		if v, err := strconv.ParseInt(n, 10, 64); err == nil && v > 0 {
			after = v
		}
	}
}

// Inject kills the process with SIGKILL when name is the configured
// failpoint and this is its configured arrival.
func Inject(name string) {
	if name != target || hits.Add(1) != after {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint: killing the process at %s\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never returns
}
