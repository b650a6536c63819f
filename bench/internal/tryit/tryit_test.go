package tryit_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/bench/internal/deploy"
)

// blockTimeout bounds one run of the block, which builds the receiver,
// exhausts a delivery into the DLQ and retries it (about 10 s once built).
const blockTimeout = 3 * time.Minute

// The Try it block, run as the README tells a reader to run it: every
// call answers as the block expects, the delivery is exhausted into the
// DLQ, and its retry from the DLQ is delivered.
func TestReadmeTryItBlock(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	block := tryItBlock(t, filepath.Join(root, "README.md"))

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	bins, err := deploy.Build(ctx, root)
	require.NoError(t, err)
	t.Cleanup(func() { _ = bins.Remove() })
	sys, err := deploy.Start(ctx, deploy.Options{Binaries: bins, Name: "tryit"})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := sys.Close(); err != nil {
			t.Errorf("stop the system: %v", err)
		}
	})

	runCtx, stop := context.WithTimeout(ctx, blockTimeout)
	defer stop()
	cmd := exec.CommandContext(runCtx, "bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = root // the block builds ./bench/receiver
	cmd.Env = append(os.Environ(), "API="+sys.APIURL, "ADMIN_TOKEN="+sys.AdminToken,
		"RECEIVER_PORT="+freePort(t))
	// Its own process group, so that the receiver it starts in the
	// background is stopped with it whatever happens.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("the block ran for %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		if errors.Is(runCtx.Err(), context.DeadlineExceeded) {
			err = errors.Join(err, errors.New("the block did not finish within "+blockTimeout.String()))
		}
		t.Fatalf("the Try it block failed: %v\napi log:\n%s\nworker log:\n%s\ndlq log:\n%s",
			err, sys.LogTail("api", 20), sys.LogTail("worker", 20), sys.LogTail("dlq", 20))
	}

	for _, want := range []string{
		`"deliveries": 1`,                          // the publish answer
		"exhausted: 2 attempt(s), last answer 500", // both attempts failed
		`"status": "exhausted"`,                    // the DLQ entry,
		`"dead_lettered_at": "`,                    // recorded by the dlq
		`"retry_of": "`,                            // the retry from the DLQ was accepted
		"succeeded: 3 attempt(s), last answer 200", // and delivered
		`"entries":0`,                              // the DLQ is empty again
		`"delivered": 1`, `"bad_signatures": 0`,    // the receiver's counts
	} {
		require.Contains(t, string(out), want)
	}
}

// tryItBlock returns the first ```bash fenced block under the "## Try it"
// heading of the Markdown file at path.
func tryItBlock(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var block strings.Builder
	inSection, inBlock := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inBlock && strings.TrimSpace(line) == "```":
			return block.String()
		case inBlock:
			block.WriteString(line + "\n")
		case strings.HasPrefix(line, "## "):
			inSection = strings.TrimSpace(line) == "## Try it"
		case inSection && strings.TrimSpace(line) == "```bash":
			inBlock = true
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("%s: no ```bash block under the \"## Try it\" heading", path)
	return ""
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test's directory")
		dir = parent
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
