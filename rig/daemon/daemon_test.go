package daemon

import (
	"context"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFreeAddrs checks that both pickers return distinct loopback
// addresses. Whether a port is still free when listened on again is not
// asserted: other test processes (the chaos test among them) draw from the
// same range at the same time, and may rightly hold one. What keeps a port
// usable across restarts, its lying outside the ephemeral range, is
// checked by TestFreeAddrsOutsideEphemeralRange.
func TestFreeAddrs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		free func(int) ([]string, error)
	}{
		{"FreeAddrs", FreeAddrs},
		{"FreeAddrsOutsideEphemeral", FreeAddrsOutsideEphemeral},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addrs, err := tc.free(4)
			if err != nil {
				t.Fatal(err)
			}
			if len(addrs) != 4 {
				t.Fatalf("asked for 4 addresses, got %v", addrs)
			}
			seen := map[string]bool{}
			for _, a := range addrs {
				if seen[a] {
					t.Fatalf("%s twice in %v", a, addrs)
				}
				seen[a] = true
				if host, _, err := net.SplitHostPort(a); err != nil || host != "127.0.0.1" {
					t.Fatalf("%s is not a loopback address", a)
				}
			}
		})
	}
}

func TestFreeAddrsOutsideEphemeralRange(t *testing.T) {
	t.Parallel()
	lo, hi := ephemeralRange()
	addrs, err := FreeAddrsOutsideEphemeral(8)
	if err != nil {
		t.Fatal(err)
	}
	if lo-1024 < 5000 && 65535-hi < 5000 {
		t.Skipf("ephemeral range %d-%d leaves no room outside it", lo, hi)
	}
	for _, a := range addrs {
		_, p, _ := net.SplitHostPort(a)
		port, _ := strconv.Atoi(p)
		if port >= lo && port <= hi {
			t.Errorf("%s lies in the ephemeral range %d-%d", a, lo, hi)
		}
	}
}

func TestChildEnv(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://behind-your-back")
	t.Setenv("FULFILLMENT_FAILPOINT", "x")
	t.Setenv("DAEMON_TEST_KEPT", "1")
	env := ChildEnv("DATABASE_URL=postgres://wanted")
	for _, kv := range env {
		if strings.HasPrefix(kv, "FULFILLMENT_") || kv == "DATABASE_URL=postgres://behind-your-back" {
			t.Errorf("ChildEnv kept %s", kv)
		}
	}
	if !slices.Contains(env, "DAEMON_TEST_KEPT=1") {
		t.Error("ChildEnv dropped an unrelated variable")
	}
	if env[len(env)-1] != "DATABASE_URL=postgres://wanted" {
		t.Errorf("ChildEnv does not end with extra: %q", env[len(env)-1])
	}
}

func TestProcessStopAndKill(t *testing.T) {
	t.Parallel()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	p, err := Start(sleep, []string{"60"}, ChildEnv(), &Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Running() || p.State() != nil {
		t.Fatal("process not running after Start")
	}
	st, err := p.Stop(5 * time.Second)
	if err != nil || st == nil || p.Running() {
		t.Fatalf("Stop: %v, %v, running %v", st, err, p.Running())
	}
	if Killed(st) {
		t.Errorf("SIGTERM reported as SIGKILL: %v", st)
	}

	p, err = Start(sleep, []string{"60"}, ChildEnv(), &Buffer{}, OwnProcessGroup())
	if err != nil {
		t.Fatal(err)
	}
	if st, err = p.Kill(); err != nil || !Killed(st) {
		t.Fatalf("Kill: %v, %v", st, err)
	}
	if st2, err := p.Stop(time.Second); err != nil || st2 != st {
		t.Errorf("Stop after Kill: %v, %v", st2, err)
	}
}

func TestWaitReadyFailsWhenTheProcessExits(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh binary")
	}
	out := &Buffer{}
	p, err := Start(sh, []string{"-c", "echo bye; exit 3"}, ChildEnv(), out)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := FreeAddrs(2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = p.WaitReady(ctx, addrs[0], addrs[1])
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Fatalf("WaitReady = %v, want an early exit", err)
	}
	if st, _ := p.Wait(ctx); st.ExitCode() != 3 {
		t.Errorf("exit state %v, want status 3", st)
	}
	if got := out.String(); got != "bye\n" {
		t.Errorf("output %q", got)
	}
	if Tail("abcdef", 3) != "…def" || FileTail("/nonexistent", 3) != "" {
		t.Error("Tail or FileTail")
	}
}
