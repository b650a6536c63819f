// Package deploy runs hookline as an operator would, for the load programs
// under bench/: the api, worker and dlq binaries built from the working
// tree, each a separate process started with default settings and only the
// environment it needs, on a Postgres database, a RabbitMQ vhost and a
// Redis key prefix of their own. Close stops the processes and removes all
// three, and the cluster roles the first migration created, so that a run
// leaves nothing behind, whether it ends well, fails or is interrupted.
//
// It imports nothing from hookline's internal packages on purpose: a load
// program built on it compiles even while those packages are being edited,
// and measures whatever code the binaries were built from.
package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hookline/hookline/bench/internal/report"
)

// Binaries is a directory holding the api, worker and dlq commands.
type Binaries struct {
	Dir string
}

// Build compiles ./cmd/api, ./cmd/worker and ./cmd/dlq of the module in
// src ("" or ".": the current directory) into a fresh temporary directory,
// within ten minutes, and writes them to disk (report.FlushWrites).
func Build(ctx context.Context, src string) (Binaries, error) {
	dir, err := os.MkdirTemp("", "hookline-bin-")
	if err != nil {
		return Binaries{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "./cmd/api", "./cmd/worker", "./cmd/dlq")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return Binaries{}, fmt.Errorf("go build ./cmd/api ./cmd/worker ./cmd/dlq: %w\n%s", err, out)
	}
	report.FlushWrites()
	return Binaries{Dir: dir}, nil
}

// Remove deletes the binaries.
func (b Binaries) Remove() error { return os.RemoveAll(b.Dir) }

// Options say what Start runs.
type Options struct {
	// Binaries are the commands to run. Required.
	Binaries Binaries
	// Name goes into the names of the database, vhost and key prefix, so
	// that a leftover (after kill -9) says which program made it. Default
	// "bench".
	Name string
	// LogDir keeps each process's output as <LogDir>/<name>-<process>.log.
	// Default "": the output goes to a temporary directory removed by Close
	// (LogTail still reads it until then).
	LogDir string
	// APIs and Workers are how many api and worker processes to run.
	// Default 1 each. The first of each is named "api" and "worker", the
	// others "api-2", "worker-2" and so on.
	APIs, Workers int
	// AMQPURL, when set, is given to every process as it is (a cluster's
	// list of node URLs, say), and no vhost is made for the system: the
	// broker is the caller's, and its default vhost is the system's own.
	AMQPURL string
	// Env is more environment for every process (REDIS_MODE, REDIS_URL,
	// AMQP_SHARDS, ...); it overrides the defaults Start sets.
	Env []string
	// DBParams are query parameters added to every process's
	// DATABASE_URL, as pgx reads them (pool_max_conn_lifetime=1m, say).
	DBParams string
}

// System is a running api, worker and dlq.
type System struct {
	// APIURL is the first api's base URL, http://127.0.0.1:port, and
	// APIURLs every api's, in order.
	APIURL  string
	APIURLs []string
	// WorkerMetricsURL is the first worker's Prometheus endpoint, and
	// WorkerMetricsURLs every worker's, in order.
	WorkerMetricsURL  string
	WorkerMetricsURLs []string
	// DBURL is the system's own database, named DBName.
	DBURL, DBName string
	// AdminToken authorises POST /v1/tenants.
	AdminToken string
	// AMQPURL is the system's own RabbitMQ vhost, whose exchanges and
	// queues are named with the default prefix, hookline.
	AMQPURL string

	procs   map[string]*process
	names   []string
	cleanup []func() error
}

// Processes are the names of the processes Start runs by default, in
// start order; System.Names gives those of a system started with more.
var Processes = []string{"api", "worker", "dlq"}

// processNames returns the names of apis api processes, workers worker
// processes and one dlq, in start order.
func processNames(apis, workers int) []string {
	var names []string
	for _, kind := range []struct {
		name string
		n    int
	}{{"api", apis}, {"worker", workers}, {"dlq", 1}} {
		for i := range max(kind.n, 1) {
			if i == 0 {
				names = append(names, kind.name)
			} else {
				names = append(names, fmt.Sprintf("%s-%d", kind.name, i+1))
			}
		}
	}
	return names
}

// Names returns the names of the system's processes, in start order.
func (s *System) Names() []string { return slices.Clone(s.names) }

// Start creates a database, a vhost and a key prefix, and starts the
// first api (which migrates the database), then the other apis, the
// workers and the dlq, and waits until each answers /readyz. On error
// everything made so far is removed.
func Start(ctx context.Context, o Options) (_ *System, err error) {
	if o.Name == "" {
		o.Name = "bench"
	}
	id := o.Name + "_" + randomHex(5)
	s := &System{AdminToken: randomHex(24), procs: map[string]*process{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	if err := s.prepare(ctx, id, o.AMQPURL); err != nil {
		return nil, err
	}
	logDir := o.LogDir
	if logDir == "" {
		if logDir, err = os.MkdirTemp("", "hookline-logs-"); err != nil {
			return nil, err
		}
		s.onClose(func() error { return os.RemoveAll(logDir) })
	}
	// No config/hookline.yaml in the working directory, so that the
	// repository's development configuration is not picked up: defaults
	// plus the environment only.
	workDir, err := os.MkdirTemp("", "hookline-cwd-")
	if err != nil {
		return nil, err
	}
	s.onClose(func() error { return os.RemoveAll(workDir) })
	env := s.environment(id)
	if o.DBParams != "" {
		sep := "?"
		if strings.Contains(s.DBURL, "?") {
			sep = "&"
		}
		env = append(env, "DATABASE_URL="+s.DBURL+sep+o.DBParams)
	}
	env = append(env, o.Env...)
	s.names = processNames(o.APIs, o.Workers)
	for _, name := range s.names {
		p, err := s.startProcess(ctx, o.Binaries, name, env, workDir, filepath.Join(logDir, id+"-"+name+".log"))
		if err != nil {
			return nil, err
		}
		if name == "api" { // the others need the migrated schema
			if err := p.waitReady(ctx, p.readyURL, time.Minute); err != nil {
				return nil, err
			}
		}
	}
	for _, name := range s.names[1:] {
		if err := s.procs[name].waitReady(ctx, s.procs[name].readyURL, time.Minute); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// prepare makes the database, the vhost (unless the caller gave its own
// broker URL) and the Redis clean-up, each registered for removal as soon
// as it exists.
func (s *System) prepare(ctx context.Context, id, brokerURL string) error {
	roles, err := missingRoles(ctx)
	if err != nil {
		return err
	}
	// Registered first, so run last: a role can only be dropped once no
	// database holds grants to it.
	s.onClose(func() error { return dropRoles(roles) })
	dbURL, err := createDatabase(ctx, "hookline_"+id)
	if err != nil {
		return err
	}
	s.DBURL, s.DBName = dbURL, "hookline_"+id
	s.onClose(func() error { return dropDatabase("hookline_" + id) })
	s.onClose(func() error { return deleteRedisKeys(redisPrefix(id)) })
	if brokerURL != "" {
		s.AMQPURL = brokerURL
		return nil
	}
	s.AMQPURL = amqpURL(vhostName(id))
	if err := createVhost(ctx, vhostName(id)); err != nil {
		return err
	}
	s.onClose(func() error { return deleteVhost(vhostName(id)) })
	return nil
}

// environment is what every process gets: where its services are, the
// admin token and private networks allowed (the receivers are local).
// Addresses are added per process.
func (s *System) environment(id string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"HOOKLINE_CONFIG=",
		"DATABASE_URL=" + s.DBURL,
		"REDIS_URL=" + redisURL,
		"REDIS_PREFIX=" + redisPrefix(id),
		"AMQP_URL=" + s.AMQPURL,
		"ADMIN_TOKEN=" + s.AdminToken,
		"ALLOW_PRIVATE_NETWORKS=true",
	}
}

func (s *System) startProcess(ctx context.Context, bin Binaries, name string, env []string, dir, logPath string) (*process, error) {
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	env = append(env[:len(env):len(env)], "API_ADDR="+apiAddr, "METRICS_ADDR="+metricsAddr)
	kind, _, _ := strings.Cut(name, "-")
	p, err := startProcess(filepath.Join(bin.Dir, kind), env, dir, logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s.procs[name] = p
	s.onClose(p.stop)
	p.readyURL = "http://" + metricsAddr + "/readyz"
	switch kind {
	case "api":
		s.APIURLs = append(s.APIURLs, "http://"+apiAddr)
		s.APIURL = s.APIURLs[0]
		p.readyURL = "http://" + apiAddr + "/readyz"
	case "worker":
		s.WorkerMetricsURLs = append(s.WorkerMetricsURLs, "http://"+metricsAddr+"/metrics")
		s.WorkerMetricsURL = s.WorkerMetricsURLs[0]
	}
	return p, nil
}

// Pid returns the process id of the named process, "api", "worker",
// "dlq", "api-2" and so on (0 if there is none).
func (s *System) Pid(name string) int {
	if p := s.procs[name]; p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// Kill sends SIGKILL to the named process (see Names), as a crash would,
// and waits for it to exit.
func (s *System) Kill(name string) error {
	p := s.procs[name]
	if p == nil {
		return fmt.Errorf("no process %q", name)
	}
	return p.kill()
}

// Restart starts the named process again after Kill, with the same
// environment and addresses, and waits until it answers /readyz.
func (s *System) Restart(ctx context.Context, name string) error {
	old := s.procs[name]
	if old == nil {
		return fmt.Errorf("no process %q", name)
	}
	p, err := startProcess(old.path, old.env, old.dir, old.logPath)
	if err != nil {
		return fmt.Errorf("restart %s: %w", name, err)
	}
	p.readyURL = old.readyURL
	s.procs[name] = p
	s.onClose(p.stop)
	return p.waitReady(ctx, p.readyURL, time.Minute)
}

// LogTail returns the last n lines the named process wrote.
func (s *System) LogTail(name string, n int) string {
	if p := s.procs[name]; p != nil {
		return tail(p.logPath, n)
	}
	return ""
}

// Close stops the processes (SIGTERM, then SIGKILL after 20 s) and removes
// the key prefix, the vhost, the database and the roles the migration
// created, in reverse order of making. It reports every failure.
func (s *System) Close() error {
	var errs []error
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		errs = append(errs, s.cleanup[i]())
	}
	s.cleanup = nil
	return errors.Join(errs...)
}

func (s *System) onClose(f func() error) { s.cleanup = append(s.cleanup, f) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
