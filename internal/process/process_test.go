package process_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/internal/redistest"
	"github.com/hookline/hookline/internal/signature"
	"github.com/hookline/hookline/internal/testlog"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binary builds the three commands once per test run and returns the path
// of name.
func binary(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "hookline-bin-")
		if buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", binDir+"/", "github.com/hookline/hookline/cmd/...").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("%v: %s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(binDir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

type proc struct {
	cmd *exec.Cmd
	// out is the process's output, written by exec's copier and read by
	// the test.
	out  *testlog.Buffer
	done chan error
}

// smallPools is the config file every process of these tests starts with
// unless a test names its own: default settings but a small database pool,
// so that the processes of parallel tests stay well under Postgres's
// connection limit.
const smallPools = "database:\n  max_conns: 8\n"

func start(t *testing.T, name string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary(t, name))
	cmd.Dir = t.TempDir() // no config/hookline.yaml here: defaults plus env only
	cfg := filepath.Join(cmd.Dir, "small-pools.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(smallPools), 0o600))
	// The test's own Redis prefix, shared by its processes and emptied when
	// it ends; env may name another (the last value of a name wins).
	cmd.Env = append(os.Environ(), append([]string{"HOOKLINE_CONFIG=" + cfg, "ADMIN_TOKEN=process-test-token",
		"REDIS_PREFIX=" + redisPrefix(t)}, env...)...)
	p := &proc{cmd: cmd, out: &testlog.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		p.done <- <-p.done
	})
	return p
}

// redisPrefixes holds each running test's Redis key prefix.
var redisPrefixes sync.Map // *testing.T -> string

// redisPrefix is t's Redis key prefix: the same for every process the test
// starts, its keys deleted when the test ends.
func redisPrefix(t *testing.T) string {
	t.Helper()
	if p, ok := redisPrefixes.Load(t); ok {
		return p.(string)
	}
	p := redistest.Prefix(t)
	redisPrefixes.Store(t, p)
	t.Cleanup(func() { redisPrefixes.Delete(t) })
	return p
}

// kill stops the process with SIGKILL and waits until it is gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	err := <-p.done
	p.done <- err
	require.ErrorContains(t, err, "signal: killed")
}

// waitReady polls url until it answers 200.
func waitReady(t *testing.T, p *proc, url string) {
	t.Helper()
	waitStatus(t, p, url, http.StatusOK, "")
}

// waitStatus polls url until it answers status with a body containing
// want, failing after 30 s or if the process exits first. It returns the
// body of that answer.
func waitStatus(t *testing.T, p *proc, url string, status int, want string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if res, err := http.Get(url); err == nil {
			body := new(bytes.Buffer)
			_, _ = body.ReadFrom(res.Body)
			res.Body.Close()
			if res.StatusCode == status && strings.Contains(body.String(), want) {
				return body.String()
			}
		}
		select {
		case err := <-p.done:
			t.Fatalf("process exited while waiting for %d from %s: %v\n%s", status, url, err, p.out)
		case <-deadline:
			t.Fatalf("%s did not answer %d within 30s\n%s", url, status, p.out)
		case <-tick.C:
		}
	}
}

func stopWithSIGTERM(t *testing.T, p *proc) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.done:
		require.NoError(t, err, "clean exit after SIGTERM\n%s", p.out)
		p.done <- nil
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30s of SIGTERM\n%s", p.out)
	}
}

// Each process starts, reports ready once Postgres, Redis and RabbitMQ
// answer, serves its metrics, and exits 0 on SIGTERM.
func TestProcessesStartServeAndStopOnSIGTERM(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewURL(t, false)
	apiAddr := freeAddr(t)
	api := start(t, "api", "DATABASE_URL="+dbURL, "API_ADDR="+apiAddr)
	waitReady(t, api, "http://"+apiAddr+"/readyz")

	for _, name := range []string{"worker", "dlq"} {
		t.Run(name, func(t *testing.T) {
			addr := freeAddr(t)
			p := start(t, name, "DATABASE_URL="+dbURL, "METRICS_ADDR="+addr)
			waitReady(t, p, "http://"+addr+"/readyz")
			for _, path := range []string{"/healthz", "/metrics"} {
				res, err := http.Get("http://" + addr + path)
				require.NoError(t, err)
				res.Body.Close()
				require.Equal(t, http.StatusOK, res.StatusCode, path)
			}
			stopWithSIGTERM(t, p)
		})
	}
	stopWithSIGTERM(t, api)
}

// With Redis unreachable the process still starts, and readiness names
// Redis as what is down.
func TestReadinessNamesTheDependencyThatIsDown(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewURL(t, false)
	apiAddr := freeAddr(t)
	deadRedis := freeAddr(t)
	api := start(t, "api", "DATABASE_URL="+dbURL, "API_ADDR="+apiAddr, "REDIS_URL=redis://"+deadRedis+"/0")
	body := waitStatus(t, api, "http://"+apiAddr+"/readyz", http.StatusServiceUnavailable, `"down":["redis"]`)
	require.Contains(t, body, `"rabbitmq":"ok"`)
	require.Contains(t, body, `"postgres":"ok"`)
	stopWithSIGTERM(t, api)
}

// A bad setting stops the process at start with a message naming it.
func TestBadConfigurationIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env, want string
	}{
		{"DATABASE_URL=mysql://x", "database.url (DATABASE_URL)"},
		{"ALLOW_PRIVATE_NETWORKS=perhaps", "ALLOW_PRIVATE_NETWORKS"},
		{"API_ADDR=8080", "api.addr (API_ADDR)"},
		{"ADMIN_TOKEN=", "api.admin_token (ADMIN_TOKEN)"},
	} {
		for _, name := range []string{"api", "worker", "dlq"} {
			p := start(t, name, tc.env)
			select {
			case err := <-p.done:
				p.done <- err
				require.Error(t, err, "%s with %s", name, tc.env)
				require.Contains(t, p.out.String(), tc.want, "%s with %s", name, tc.env)
			case <-time.After(20 * time.Second):
				t.Fatalf("%s with %s did not exit", name, tc.env)
			}
		}
	}
}

// An api killed with SIGKILL after answering 202, before it could publish
// anything (its broker address is dead), loses nothing: a fresh api's relay
// publishes every delivery.
func TestAcceptedEventsSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	addr1 := freeAddr(t)
	api1 := start(t, "api", "DATABASE_URL="+dbURL, "API_ADDR="+addr1, "AMQP_PREFIX="+topo.Prefix,
		"AMQP_URL=amqp://guest:guest@"+freeAddr(t)+"/")
	waitStatus(t, api1, "http://"+addr1+"/healthz", http.StatusOK, "")

	base := "http://" + addr1
	tenant := postJSON(t, base+"/v1/tenants", "process-test-token", `{"name": "acme"}`, http.StatusCreated)
	key := tenant["api_key"].(string)
	postJSON(t, base+"/v1/webhooks", key, `{"url": "https://8.8.8.8/a", "events": ["*"]}`, http.StatusCreated)
	postJSON(t, base+"/v1/webhooks", key, `{"url": "https://8.8.8.8/b", "events": ["order.*"]}`, http.StatusCreated)
	want := 0
	for i := range 10 {
		typ := []string{"order.created", "user.created"}[i%2]
		res := postJSON(t, base+"/v1/events", key, fmt.Sprintf(`{"event_type": %q, "data": {"i": %d}}`, typ, i), http.StatusAccepted)
		want += int(res["deliveries"].(float64))
	}
	require.Equal(t, 15, want)
	api1.kill(t)
	require.Zero(t, depth(t, topo), "the killed api published nothing")

	addr2 := freeAddr(t)
	api2 := start(t, "api", "DATABASE_URL="+dbURL, "API_ADDR="+addr2, "AMQP_PREFIX="+topo.Prefix)
	waitReady(t, api2, "http://"+addr2+"/readyz")
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for depth(t, topo) < want {
		select {
		case <-deadline:
			t.Fatalf("relay published %d of %d deliveries within 30s\n%s", depth(t, topo), want, api2.out)
		case <-tick.C:
		}
	}
	require.Equal(t, want, depth(t, topo), "each delivery once")
	stopWithSIGTERM(t, api2)
}

func depth(t *testing.T, topo queue.Topology) int {
	n := 0
	for _, p := range queue.Priorities {
		n += queuetest.Depth(t, topo.WorkQueue(p))
	}
	return n
}

func postJSON(t *testing.T, url, token, body string, status int) map[string]any {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	require.Equal(t, status, res.StatusCode, "%v", out)
	return out
}

// system starts an api and returns its base URL and a tenant key with one
// webhook to url.
func startAPI(t *testing.T, dbURL string, topo queue.Topology, hookURL string) (string, string) {
	t.Helper()
	addr := freeAddr(t)
	api := start(t, "api", "DATABASE_URL="+dbURL, "API_ADDR="+addr, "AMQP_PREFIX="+topo.Prefix, "ALLOW_PRIVATE_NETWORKS=true")
	waitReady(t, api, "http://"+addr+"/readyz")
	base := "http://" + addr
	tenant := postJSON(t, base+"/v1/tenants", "process-test-token", `{"name": "acme"}`, http.StatusCreated)
	key := tenant["api_key"].(string)
	postJSON(t, base+"/v1/webhooks", key, fmt.Sprintf(`{"url": %q, "events": ["*"]}`, hookURL), http.StatusCreated)
	return base, key
}

func startWorker(t *testing.T, dbURL string, topo queue.Topology, env ...string) *proc {
	t.Helper()
	addr := freeAddr(t)
	w := start(t, "worker", append([]string{"DATABASE_URL=" + dbURL, "METRICS_ADDR=" + addr, "AMQP_PREFIX=" + topo.Prefix,
		"ALLOW_PRIVATE_NETWORKS=true"}, env...)...)
	waitReady(t, w, "http://"+addr+"/readyz")
	return w
}

func deliveryState(t *testing.T, dbURL string) (status string, attempts, rows int) {
	t.Helper()
	pool, err := db.Open(context.Background(), dbURL, 1)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT d.status, d.attempt_count,
		(SELECT count(*) FROM delivery_attempts a WHERE a.delivery_id = d.id) FROM deliveries d`).Scan(&status, &attempts, &rows))
	return status, attempts, rows
}

// A worker killed with SIGKILL in the middle of a delivery: another worker
// delivers it, and the attempt is recorded once.
func TestWorkerKilledMidDelivery(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 10)
	var mu sync.Mutex
	var attemptsSeen []string
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // lets the server notice the client going away
		mu.Lock()
		attemptsSeen = append(attemptsSeen, r.Header.Get("X-Webhook-Attempt"))
		first := len(attemptsSeen) == 1
		mu.Unlock()
		if first {
			arrived <- struct{}{}
			<-r.Context().Done() // hold the first request until the worker dies
			return
		}
	}))
	defer rc.Close()
	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	base, key := startAPI(t, dbURL, topo, rc.URL)
	w1 := startWorker(t, dbURL, topo)
	postJSON(t, base+"/v1/events", key, `{"event_type": "order.created", "data": {"n": 1}}`, http.StatusAccepted)
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("the first attempt never arrived\n%s", w1.out)
	}
	w1.kill(t)

	w2 := startWorker(t, dbURL, topo)
	deadline := time.After(60 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if status, _, _ := deliveryState(t, dbURL); status == "succeeded" {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("the delivery did not succeed after the worker was killed\n%s", w2.out)
		case <-tick.C:
		}
	}
	status, attempts, rows := deliveryState(t, dbURL)
	require.Equal(t, "succeeded", status)
	require.Equal(t, 1, attempts, "the killed attempt was never recorded, so the second is attempt 1")
	require.Equal(t, 1, rows, "no attempt number recorded twice")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"1", "1"}, attemptsSeen, "the endpoint saw attempt 1 twice (at-least-once)")
}

// SIGTERM lets an in-flight attempt finish and be recorded before the
// worker exits.
func TestWorkerSIGTERMFinishesInFlight(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-release
	}))
	defer rc.Close()
	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	base, key := startAPI(t, dbURL, topo, rc.URL)
	w := startWorker(t, dbURL, topo)
	postJSON(t, base+"/v1/events", key, `{"event_type": "order.created", "data": {}}`, http.StatusAccepted)
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("the attempt never arrived\n%s", w.out)
	}
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	time.AfterFunc(500*time.Millisecond, func() { close(release) })
	select {
	case err := <-w.done:
		w.done <- err
		require.NoError(t, err, w.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker did not exit\n%s", w.out)
	}
	status, attempts, rows := deliveryState(t, dbURL)
	require.Equal(t, "succeeded", status, w.out.String())
	require.Equal(t, 1, attempts)
	require.Equal(t, 1, rows)
}

// A dlq process killed with SIGKILL halfway through a batch retry: a
// restarted one takes the batch over once the claim times out and finishes
// it from its checkpoint, giving every exhausted delivery exactly one
// retry.
func TestBatchRetryResumesAfterDLQSIGKILL(t *testing.T) {
	t.Parallel()
	f := newBatchKillFixture(t)
	dbURL, topo, base, key, pool, count := f.dbURL, f.topo, f.base, f.key, f.pool, f.count(t)
	var err error
	const n = 600
	_, err = pool.Exec(context.Background(), `WITH ev AS (
    INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
    SELECT uuidv7(), t.id, 'order.created', 'seed-' || g, '\x00', 'normal', json_build_object('n', g)
    FROM generate_series(1, $1) g, tenants t
    RETURNING id, tenant_id, created_at)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, status, priority, attempt_count, failure_category,
    last_status_code, completed_at, dead_lettered_at, created_at)
SELECT uuidv7(), ev.tenant_id, ev.id, w.id, 'exhausted', 'normal', 1, 'server_error', 502, now(), now(), ev.created_at
FROM ev, webhooks w`, n)
	require.NoError(t, err)
	startWorker(t, dbURL, topo)

	id, atKill := f.runKilledMidway(t, n, "the batch", func() string {
		batch := postJSON(t, base+"/v1/dlq/retry-batch", key,
			`{"filter": {"failure_categories": ["server_error"]}, "rate_limit": {"requests_per_second": 100}}`, http.StatusAccepted)
		return batch["batch_operation_id"].(string)
	})
	require.Equal(t, n, count(`SELECT succeeded FROM batch_operations WHERE id = $1`, id))
	require.Equal(t, n, count(`SELECT processed FROM batch_operations WHERE id = $1`, id))
	require.Equal(t, n, count(`SELECT count(*) FROM deliveries WHERE retry_of IS NOT NULL`), "one retry per exhausted delivery")
	require.Equal(t, n, count(`SELECT count(DISTINCT retry_of) FROM deliveries WHERE retry_of IS NOT NULL`))

	f.requireReceivedOnce(t, n, atKill, "every event reached the receiver")
}

// batchKillFixture is a system whose batch operations a test runs in dlq
// processes it kills: an api on a database of its own, its receiver
// counting requests per event, limits high enough not to slow the batch.
type batchKillFixture struct {
	dbURL, base, key string
	topo             queue.Topology
	pool             *pgxpool.Pool
	cfgFile          string

	mu   sync.Mutex
	seen map[string]int // requests per idempotency key (one key per event)
}

func newBatchKillFixture(t *testing.T) *batchKillFixture {
	t.Helper()
	f := &batchKillFixture{seen: map[string]int{}}
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		f.mu.Lock()
		f.seen[r.Header.Get("X-Idempotency-Key")]++
		f.mu.Unlock()
	}))
	t.Cleanup(rc.Close)
	f.dbURL, f.topo = dbtest.NewURL(t, false), queuetest.NewTopology(t)
	f.base, f.key = startAPI(t, f.dbURL, f.topo, rc.URL)
	pool, err := db.Open(context.Background(), f.dbURL, 2)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	f.pool = pool
	_, err = pool.Exec(context.Background(), `UPDATE tenants SET rate_limit_rpm = 600000, rate_limit_burst = 10000;
		UPDATE webhooks SET rate_limit = '{"requests_per_minute": 600000, "burst": 10000}'`)
	require.NoError(t, err)
	f.cfgFile = filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(f.cfgFile, []byte(smallPools+"dlq:\n  batch_claim_timeout: 2s\n"), 0o600))
	return f
}

// count runs a query answering one integer.
func (f *batchKillFixture) count(t *testing.T) func(sql string, args ...any) int {
	return func(sql string, args ...any) int {
		var n int
		require.NoError(t, f.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
		return n
	}
}

func (f *batchKillFixture) startDLQ(t *testing.T) *proc {
	addr := freeAddr(t)
	p := start(t, "dlq", "DATABASE_URL="+f.dbURL, "METRICS_ADDR="+addr, "AMQP_PREFIX="+f.topo.Prefix, "HOOKLINE_CONFIG="+f.cfgFile)
	waitReady(t, p, "http://"+addr+"/readyz")
	return p
}

// runKilledMidway starts a dlq process, starts the batch operation of n
// items with begin, kills the process with SIGKILL a third of the way and
// waits for a restarted one to complete it. It returns the batch's id and
// how far it had got at the kill.
func (f *batchKillFixture) runKilledMidway(t *testing.T, n int, what string, begin func() string) (string, int) {
	t.Helper()
	count := f.count(t)
	dlq1 := f.startDLQ(t)
	id := begin()
	waitFor(t, 30*time.Second, dlq1, func() bool {
		return count(`SELECT processed FROM batch_operations WHERE id = $1`, id) >= n/3
	}, what+" to get a third of the way")
	dlq1.kill(t)
	atKill := count(`SELECT processed FROM batch_operations WHERE id = $1`, id)
	require.Less(t, atKill, n, "killed before the end")

	dlq2 := f.startDLQ(t)
	waitFor(t, 60*time.Second, dlq2, func() bool {
		return count(`SELECT count(*) FROM batch_operations WHERE id = $1 AND state = 'completed'`, id) == 1
	}, what+" to complete after the restart")
	return id, atKill
}

// requireReceivedOnce checks that the receiver saw each of n events, and
// at most one chunk of them twice.
func (f *batchKillFixture) requireReceivedOnce(t *testing.T, n, atKill int, msg string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.seen, n, msg)
	dups := 0
	for _, c := range f.seen {
		dups += c - 1
	}
	t.Logf("killed at %d of %d; duplicate requests at the receiver: %d", atKill, n, dups)
	// Only the chunk whose messages were published but not yet marked
	// enqueued when the process died can be published twice (by the relay).
	require.LessOrEqual(t, dups, 10, "at most one chunk (rate/10) delivered twice")
}

// waitFor polls cond every 100 ms, failing after timeout or if p exits.
func waitFor(t *testing.T, timeout time.Duration, p *proc, cond func() bool, what string) {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case err := <-p.done:
			t.Fatalf("process exited while waiting for %s: %v\n%s", what, err, p.out)
		case <-deadline:
			t.Fatalf("not within %s: %s\n%s", timeout, what, p.out)
		case <-tick.C:
		}
	}
}

// Strict ordering across worker processes: 1,000 events to a strict webhook
// arrive in publish order while four workers share the work and one of
// them is killed with SIGKILL halfway.
func TestStrictOrderSurvivesAWorkerKill(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []int // n of each request, in arrival order
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Data struct {
				N int `json:"n"`
			} `json:"data"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		order = append(order, body.Data.N)
		mu.Unlock()
	}))
	defer rc.Close()
	arrived := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), order...)
	}
	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	addr := freeAddr(t)
	api := start(t, "api", "DATABASE_URL="+dbURL, "API_ADDR="+addr, "AMQP_PREFIX="+topo.Prefix, "ALLOW_PRIVATE_NETWORKS=true")
	base := "http://" + addr
	waitReady(t, api, base+"/readyz")
	tenant := postJSON(t, base+"/v1/tenants", "process-test-token",
		`{"name": "acme", "rate_limit": {"requests_per_minute": 600000, "burst": 10000}}`, http.StatusCreated)
	key := tenant["api_key"].(string)
	postJSON(t, base+"/v1/webhooks", key, fmt.Sprintf(`{"url": %q, "events": ["*"], "ordering_guarantee": "strict",
		"rate_limit": {"requests_per_minute": 600000, "burst": 10000}}`, rc.URL), http.StatusCreated)
	// Small pools: four workers beside the rest of the suite must stay well
	// under Postgres's connection limit.
	small := filepath.Join(t.TempDir(), "small.yaml")
	require.NoError(t, os.WriteFile(small, []byte("database:\n  max_conns: 6\nworker:\n  concurrency: 32\n  prefetch: 32\n"), 0o600))
	var workers []*proc
	for range 4 {
		workers = append(workers, startWorker(t, dbURL, topo, "HOOKLINE_CONFIG="+small))
	}

	const n = 1000
	for i := range n {
		postJSON(t, base+"/v1/events", key, fmt.Sprintf(`{"event_type": "order.updated", "data": {"n": %d}}`, i), http.StatusAccepted)
	}
	waitFor(t, 60*time.Second, workers[1], func() bool { return len(arrived()) >= n/2 }, "half of the events to arrive")
	workers[0].kill(t)
	waitFor(t, 120*time.Second, workers[1], func() bool {
		got := arrived()
		return len(got) > 0 && got[len(got)-1] == n-1
	}, "the last event to arrive")

	got := arrived()
	for i := 1; i < len(got); i++ {
		require.Contains(t, []int{got[i-1], got[i-1] + 1}, got[i],
			"arrival %d: event %d after event %d (only the next one, or a repeat of the same, may follow)", i, got[i], got[i-1])
	}
	require.Equal(t, 0, got[0])
	t.Logf("%d requests for %d events (%d repeated after the kill)", len(got), n, len(got)-n)
}

// With SECRET_KEYS set, the api stores webhook secrets sealed and the
// worker opens them to sign: the secret is nowhere in the webhooks table,
// and the receiver gets a delivery signed with it.
func TestSealedSecretsDeliverSigned(t *testing.T) {
	t.Parallel()
	type request struct {
		header http.Header
		body   []byte
	}
	got := make(chan request, 1)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case got <- request{r.Header.Clone(), body}:
		default:
		}
	}))
	defer rc.Close()
	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	keys := "SECRET_KEYS=k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	addr := freeAddr(t)
	api := start(t, "api", "DATABASE_URL="+dbURL, "API_ADDR="+addr, "AMQP_PREFIX="+topo.Prefix, "ALLOW_PRIVATE_NETWORKS=true", keys)
	base := "http://" + addr
	waitReady(t, api, base+"/readyz")
	tenant := postJSON(t, base+"/v1/tenants", "process-test-token", `{"name": "acme"}`, http.StatusCreated)
	key := tenant["api_key"].(string)
	hook := postJSON(t, base+"/v1/webhooks", key, fmt.Sprintf(`{"url": %q, "events": ["*"],
		"headers": {"Authorization": "Bearer endpoint-credential-42"}}`, rc.URL), http.StatusCreated)
	plain := hook["secret"].(string)
	startWorker(t, dbURL, topo, keys)
	postJSON(t, base+"/v1/events", key, `{"event_type": "order.created", "data": {"n": 1}}`, http.StatusAccepted)
	select {
	case r := <-got:
		require.NoError(t, signature.VerifyStandard(plain, r.header.Get("Webhook-Id"), r.header.Get("Webhook-Timestamp"),
			r.header.Get("Webhook-Signature"), r.body, time.Now(), 5*time.Minute), "signed with the secret the api returned")
		require.Equal(t, "Bearer endpoint-credential-42", r.header.Get("Authorization"), "custom headers are opened for sending")
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery within 30s")
	}

	pool, err := db.Open(context.Background(), dbURL, 1)
	require.NoError(t, err)
	defer pool.Close()
	var row string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT w::text FROM webhooks w`).Scan(&row))
	require.NotContains(t, row, plain, "the secret is stored sealed")
	require.NotContains(t, row, strings.TrimPrefix(plain, "whsec_"))
	require.NotContains(t, row, "endpoint-credential-42", "custom header values are stored sealed")
}

// A worker is ready only while its consumer is subscribed: with its work
// queue deleted under it, readiness names the consumer, and the worker is
// ready again once the queue is back.
func TestWorkerReadinessFollowsItsConsumer(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	addr := freeAddr(t)
	w := start(t, "worker", "DATABASE_URL="+dbURL, "METRICS_ADDR="+addr, "AMQP_PREFIX="+topo.Prefix)
	waitReady(t, w, "http://"+addr+"/readyz")

	queuetest.WithChannel(t, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(topo.WorkQueue("high"), false, false, false)
		return err
	})
	waitStatus(t, w, "http://"+addr+"/readyz", http.StatusServiceUnavailable, `"down":["consumer"]`)
	queuetest.WithChannel(t, topo.Declare)
	waitReady(t, w, "http://"+addr+"/readyz")
	stopWithSIGTERM(t, w)
}

// A part that fails stops the whole process with an error naming it: here
// the operations server, whose port is taken.
func TestAFailingPartStopsTheProcess(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewURL(t, false)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	w := start(t, "worker", "DATABASE_URL="+dbURL, "METRICS_ADDR="+taken.Addr().String(), "AMQP_PREFIX="+queuetest.NewTopology(t).Prefix)
	select {
	case err := <-w.done:
		w.done <- err
		require.Error(t, err)
		require.Contains(t, w.out.String(), "operations server: serve "+taken.Addr().String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker kept running without its operations server\n%s", w.out)
	}
}

// An api killed with SIGKILL halfway through the messages of its publish
// queue: the events it committed are there once, and a fresh api
// publishes the rest, the messages the killed one had taken but not
// acknowledged included (replays of their keys, not second events).
// Half the messages carry an Idempotency-Key header, half only a message
// id, which stands for the key.
func TestQueuePublishesSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	const n = 4000
	dbURL := dbtest.NewURL(t, false)
	topo := queuetest.NewTopology(t)
	addr1 := freeAddr(t)
	api1 := start(t, "api", "DATABASE_URL="+dbURL, "API_ADDR="+addr1, "AMQP_PREFIX="+topo.Prefix)
	waitReady(t, api1, "http://"+addr1+"/readyz")
	base := "http://" + addr1
	key := postJSON(t, base+"/v1/tenants", "process-test-token",
		`{"name": "queue", "publish_rate_limit": {"requests_per_second": 100000, "burst": 100000}}`, http.StatusCreated)["api_key"].(string)
	postJSON(t, base+"/v1/webhooks", key, `{"url": "https://8.8.8.8/a", "events": ["*"]}`, http.StatusCreated)
	api1.kill(t)

	queuetest.WithChannel(t, func(ch *amqp.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		confirms := make([]*amqp.DeferredConfirmation, 0, n)
		for i := range n {
			msg := amqp.Publishing{DeliveryMode: amqp.Persistent, Headers: amqp.Table{"Authorization": "Bearer " + key},
				Body: fmt.Appendf(nil, `{"event_type": "order.created", "data": {"i": %d}}`, i)}
			if i%2 == 0 {
				msg.Headers["Idempotency-Key"] = fmt.Sprintf("ev-%d", i)
			} else {
				msg.MessageId = fmt.Sprintf("ev-%d", i)
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), topo.PublishExchange(), "", false, false, msg)
			if err != nil {
				return err
			}
			confirms = append(confirms, dc)
		}
		return queue.WaitConfirms(context.Background(), confirms...)
	})

	pool, err := db.Open(context.Background(), dbURL, 1)
	require.NoError(t, err)
	defer pool.Close()
	count := func(sql string) int {
		var c int
		require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&c))
		return c
	}
	addr2 := freeAddr(t)
	api2 := start(t, "api", "DATABASE_URL="+dbURL, "API_ADDR="+addr2, "AMQP_PREFIX="+topo.Prefix)
	waitFor(t, 60*time.Second, api2, func() bool { return count(`SELECT count(*) FROM events`) >= n/10 }, "a tenth published")
	api2.kill(t)
	atKill := count(`SELECT count(*) FROM events`)
	require.Less(t, atKill, n, "killed before the end")
	require.Positive(t, queuetest.Depth(t, topo.PublishQueue()), "messages left for the next api")

	addr3 := freeAddr(t)
	api3 := start(t, "api", "DATABASE_URL="+dbURL, "API_ADDR="+addr3, "AMQP_PREFIX="+topo.Prefix)
	waitFor(t, 60*time.Second, api3, func() bool {
		return count(`SELECT count(*) FROM events`) >= n && queuetest.Depth(t, topo.PublishQueue()) == 0
	}, "every message published")
	stopWithSIGTERM(t, api3)
	require.Zero(t, queuetest.Depth(t, topo.PublishQueue()), "every message acknowledged")
	require.Zero(t, queuetest.Depth(t, topo.PublishRejectedQueue()), "none refused")
	require.Equal(t, n, count(`SELECT count(*) FROM events`), "each message once")
	require.Equal(t, n, count(`SELECT count(DISTINCT idempotency_key) FROM events WHERE idempotency_key LIKE 'ev-%'`))
	require.Equal(t, n, count(`SELECT count(*) FROM deliveries`))
}
