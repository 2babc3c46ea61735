package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// KillTimeout bounds how long Kill waits for a SIGKILLed process to be
// reaped.
const KillTimeout = 10 * time.Second

// Process is one running (or exited) child process.
type Process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been reaped
}

// Option adjusts how Start runs the child.
type Option func(*syscall.SysProcAttr)

// OwnProcessGroup puts the child in a process group of its own: a Ctrl-C
// meant for the parent does not reach it, and the parent stops it instead.
func OwnProcessGroup() Option {
	return func(a *syscall.SysProcAttr) { a.Setpgid = true }
}

// Start runs bin with args in the environment env (nothing else is
// inherited), its standard output and error written to out, and returns
// once the process exists. When out is an *os.File the child gets its own
// copy: the caller may close it once Start returns.
//
// Should the parent die without stopping it (a crash, a test timeout's
// panic), the kernel SIGKILLs the child instead of leaving it orphaned.
func Start(bin string, args, env []string, out io.Writer, opts ...Option) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	for _, o := range opts {
		o(cmd.SysProcAttr)
	}
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that forked the child exits, not
		// the process: keep this goroutine on its thread for the child's
		// whole life (the thread is discarded when the goroutine ends, as
		// it is never unlocked).
		runtime.LockOSThread()
		defer close(p.exited)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait() // the exit status is in cmd.ProcessState
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	return p, nil
}

// Pid is the process ID of the child.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// State is how the process ended, or nil while it runs.
func (p *Process) State() *os.ProcessState {
	select {
	case <-p.exited:
		return p.cmd.ProcessState
	default:
		return nil
	}
}

// Wait waits until the process exits by itself and returns how it ended,
// or gives up when ctx ends.
func (p *Process) Wait(ctx context.Context) (*os.ProcessState, error) {
	select {
	case <-p.exited:
		return p.cmd.ProcessState, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for pid %d to exit: %w", p.Pid(), ctx.Err())
	}
}

// Kill SIGKILLs the process and waits up to KillTimeout until it is
// reaped. It is safe to call on an exited process.
func (p *Process) Kill() (*os.ProcessState, error) {
	_ = p.cmd.Process.Signal(syscall.SIGKILL) // fails only when already reaped
	select {
	case <-p.exited:
		return p.cmd.ProcessState, nil
	case <-time.After(KillTimeout):
		return nil, fmt.Errorf("killing pid %d: not reaped %v after SIGKILL", p.Pid(), KillTimeout)
	}
}

// Stop shuts the process down gracefully (SIGTERM) and returns how it
// ended; should it still run after grace, it is killed and the error says
// so. It is safe to call on an exited process.
func (p *Process) Stop(grace time.Duration) (*os.ProcessState, error) {
	if !p.Running() {
		return p.cmd.ProcessState, nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.cmd.ProcessState, nil
	case <-time.After(grace):
	}
	err := fmt.Errorf("stopping pid %d: it ignored SIGTERM for %v and was killed", p.Pid(), grace)
	st, kerr := p.Kill()
	return st, errors.Join(err, kerr)
}

// WaitReady polls fulfillmentd's GET /readyz on httpAddr until it answers
// 200 and then its webhook port ingestAddr until it accepts connections.
// It fails early when the process exits, and when ctx ends.
func (p *Process) WaitReady(ctx context.Context, httpAddr, ingestAddr string) error {
	start := time.Now()
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	last := errors.New("not polled yet")
	for {
		select {
		case <-p.exited:
			// The last check's error is context for people, not the cause:
			// it is not wrapped (here and below) so that callers cannot
			// mistake a failed poll for the reason.
			return fmt.Errorf("exited before it was ready (%v); last check: %v", p.cmd.ProcessState, last) //nolint:errorlint // see above
		default:
		}
		last = readyOnce(ctx, client, httpAddr, ingestAddr)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v (%w); last check: %v", time.Since(start).Round(time.Millisecond), ctx.Err(), last) //nolint:errorlint // last is context, not the cause (above)
		case <-p.exited:
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// readyOnce checks readiness once.
func readyOnce(ctx context.Context, client *http.Client, httpAddr, ingestAddr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/readyz", http.NoBody)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /readyz: %d", resp.StatusCode)
	}
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", ingestAddr)
	if err != nil {
		return err
	}
	return c.Close()
}

// Killed reports whether st is the state of a process that SIGKILL ended.
func Killed(st *os.ProcessState) bool {
	if st == nil {
		return false
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
