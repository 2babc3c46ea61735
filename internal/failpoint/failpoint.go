// Package failpoint lets crash tests kill the process at named points.
//
// Failpoints exist only in binaries built with the "failpoints" build tag;
// in every other build Inject compiles to nothing. In a failpoints build,
// FULFILLMENT_FAILPOINT=name[:n] makes the n-th (default first) arrival at
// the named point kill the process with SIGKILL, as a crash would: no
// deferred function, no graceful shutdown. With name[:n],sleep=DURATION that
// arrival sleeps instead, and goes on: the process stays alive, holding
// what it holds there, for a test to kill it or watch others wait.
package failpoint

// EnvVar names the failpoint to trigger in a failpoints build.
const EnvVar = "FULFILLMENT_FAILPOINT"

// Points lists the failpoints the code declares.
var Points = []string{"after-claim", "process-before-commit", "process-after-commit", "outbox-after-send", "order-after-create",
	"late-match-after-commit", "decide-before-commit", "decide-after-commit", "start-after-create"}
