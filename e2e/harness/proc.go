// Package harness runs the real peers of the e2e suite (etcd, kube-apiserver, kube-scheduler,
// helm, kwok) and toposched itself as child processes on 127.0.0.1, with bounded waits and
// teardown. Every process gets its own process group and dies with the test binary
// (PR_SET_PDEATHSIG), so nothing outlives a run.
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a child process whose stdout and stderr go to a log file.
type Proc struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string
	done    chan struct{}
	mu      sync.Mutex
	exitErr error
	exited  bool
}

// Start runs bin with args (env added to the test's environment); its output goes to
// logDir/name.log. The process is stopped (SIGTERM, then SIGKILL after 10 s) at test cleanup.
func Start(t testing.TB, logDir, name string, env []string, bin string, args ...string) *Proc {
	t.Helper()
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s (%s): %v", name, bin, err)
	}
	p := &Proc{Name: name, Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.exitErr, p.exited = err, true
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	return p
}

// Exited reports whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited, p.exitErr
}

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM to the process group and waits up to grace, then SIGKILLs it.
func (p *Proc) Stop(grace time.Duration) {
	if ok, _ := p.Exited(); ok {
		return
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
}

// Kill9 kills the process group with SIGKILL (a crash: no clean-up runs) and waits for it.
func (p *Proc) Kill9() {
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// Tail returns the last n bytes of the process log.
func (p *Proc) Tail(n int) string { return TailFile(p.LogPath, n) }

// TailFile returns the last n bytes of a file.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

var (
	portsMu sync.Mutex
	handed  = map[int]bool{} // ports FreePort gave out in this test binary
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and that this test
// binary has not handed out before (the kernel may offer a just-closed port again).
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for i := 0; i < 64; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		if p := l.Addr().(*net.TCPAddr).Port; !handed[p] {
			handed[p] = true
			return p
		}
	}
	t.Fatal("no unused TCP port on 127.0.0.1 after 64 tries")
	return 0
}

// Run runs a command to completion within timeout and returns its combined output.
func Run(ctx context.Context, timeout time.Duration, env []string, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return out.String(), fmt.Errorf("%s %s: timed out after %s", filepath.Base(bin), strings.Join(args, " "), timeout)
	}
	return out.String(), err
}

// permanentError ends an Eventually at once.
type permanentError struct{ error }

func (p permanentError) Unwrap() error { return p.error }

// Permanent wraps err so that Eventually stops polling and returns it (a process that exited
// will not become ready).
func Permanent(err error) error { return permanentError{err} }

// Eventually polls cond every interval until it returns true or timeout passes; it returns the
// last error cond reported (nil when cond succeeded), at once for a Permanent one.
func Eventually(timeout, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		var perm permanentError
		if errors.As(err, &perm) {
			return perm.error
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last == nil {
				last = errors.New("condition not met")
			}
			return fmt.Errorf("after %s: %w", timeout, last)
		}
		time.Sleep(interval)
	}
}
