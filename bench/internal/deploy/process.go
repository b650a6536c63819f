package deploy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is one running binary, its output going to logPath.
type process struct {
	cmd      *exec.Cmd
	logPath  string
	readyURL string
	// path, env and dir start it again (System.Restart).
	path, dir string
	env       []string
	done      chan struct{} // closed when the process has exited
}

// startProcess runs path in dir with exactly env. The process gets its own
// process group, so that a Ctrl-C at the terminal reaches only the load
// program, which then stops the processes in order; and it is killed if
// the load program dies without doing so.
func startProcess(path string, env []string, dir, logPath string) (*process, error) {
	// Appended to: a restarted process continues its log.
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path)
	cmd.Env, cmd.Dir = env, dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, err
	}
	p := &process{cmd: cmd, logPath: logPath, path: path, env: env, dir: dir, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(p.done)
	}()
	return p, nil
}

// kill sends SIGKILL and waits for the exit.
func (p *process) kill() error {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.cmd.Path, p.cmd.Process.Pid)
	}
}

// stopGrace is how long a process may take to stop after SIGTERM. The
// worker lets attempts in flight finish (up to its shutdown grace, 25 s by
// default); the load programs close their receivers first, so that none
// is left hanging.
const stopGrace = 20 * time.Second

// stop sends SIGTERM, then SIGKILL after stopGrace, and waits for the exit.
func (p *process) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopGrace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed", p.cmd.Path, stopGrace)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.cmd.Path, p.cmd.Process.Pid)
	}
}

// waitReady polls url until it answers 200, the process exits, ctx ends
// or limit passes.
func (p *process) waitReady(ctx context.Context, url string, limit time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if res, err := client.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s within %s; its output ends with:\n%s", p.cmd.Path, url, limit, tail(p.logPath, 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready; its output ends with:\n%s", p.cmd.Path, tail(p.logPath, 20))
		case <-tick.C:
		}
	}
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(raw, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	for _, l := range lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.String()
}
