package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/hookline/hookline/bench/internal/report"
)

// The goals each noisy scenario is held to, against solo.
const (
	goalShare       = 0.95 // quiet share at least 95 % of solo's
	goalP99Factor   = 2.0  // quiet p99 at most twice solo's...
	goalP99Absolute = 250 * time.Millisecond
	goalRepublishes = 2.0 // re-publishes per delivery at most
)

var header = []string{
	"scenario", "tenants (setup)", "quiet events", "drain", "quiet share <= 30 s", "share vs solo", "quiet p50", "quiet p99", "p99 vs solo",
	"noisy events", "noisy attempts (deliveries attempted)", "noisy requests received",
	"re-publishes / delivery", "postponements / delivery", "postponed_count avg / max, quiet", "postponed_count avg / max, noisy",
	"machine CPU / delivery", "hookline CPU / delivery", "worker RSS at end (peak)", "others' CPU (cores)", "goals: share, p99, re-publishes",
}

func table(o options, results []result, code string) report.Table {
	t := report.Table{
		Title:  "Fairness: quiet tenants while a noisy tenant misbehaves",
		Header: header,
		Notes:  notes(o, code),
	}
	var solo *result
	for i := range results {
		if results[i].sc.name == "solo" {
			solo = &results[i]
		}
	}
	for _, r := range results {
		row, goals := rowOf(o, r, solo)
		t.Rows = append(t.Rows, row)
		if goals != "" {
			t.Notes = append(t.Notes, goals)
		}
		if r.many != nil {
			t.Notes = append(t.Notes, manyNote(o, r))
		}
		if !r.quietBefore {
			t.Notes = append(t.Notes, fmt.Sprintf("%s: the machine was still %.2f cores busy when publishing started (waited %s for under %.1f).", r.sc.name, r.busyBefore, o.idleWait, quietBusy))
		}
		if len(r.publishErrs) > 0 {
			t.Notes = append(t.Notes, fmt.Sprintf("%s: publishing failed for %d quiet and %d noisy events; first errors: %s",
				r.sc.name, r.quietFailed, r.noisyFailed, strings.Join(r.publishErrs, "; ")))
		}
	}
	return t
}

func notes(o options, code string) []string {
	return []string{
		fmt.Sprintf("Code: %s, built once at the start. One api, one worker and one dlq, separate processes with the default settings of that code (internal/config) and only DATABASE_URL, REDIS_URL + REDIS_PREFIX, AMQP_URL (a vhost of its own), ADMIN_TOKEN, ALLOW_PRIVATE_NETWORKS=true, API_ADDR and METRICS_ADDR set; a fresh database, vhost and key prefix per scenario. Postgres, Redis, RabbitMQ, the receivers and the load generator share the machine.", code),
		fmt.Sprintf("Quiet tenants: %g events/s together for %s (solo, a, b, c: one tenant; d: ten tenants at %g/s each; e: its own line below), each to one webhook on a receiver of its own that answers 200 at once; webhook settings are the defaults except the rate limit, raised to 1,000,000/min so that it does not bind. Every tenant is created with delivery and publish limits that never bind.", o.quietRate, o.duration, o.quietRate/10),
		fmt.Sprintf("Noisy tenants (a, c, d: the hanging one; b, c, d: the flooding one; c and d have both, as two tenants): hanging = %d events/s, each to %d webhooks on %d listeners (one port each) that accept the connection and never answer, with timeout_ms %d, circuit breaker off and the rate limit raised like the quiet ones (other retry settings default: 5 attempts); flooding = %d events/s at priority high to one webhook on a healthy receiver, rate_limit %d requests/minute (burst 20, the default).", hangRate, hangWebhooks, hangWebhooks, hangTimeoutMS, floodRate, floodRPM),
		fmt.Sprintf("Open loop: event i of each tenant is scheduled at start + i/rate and posted by one of %d keep-alive senders; it carries its scheduled time, and latency is receipt minus that time (first receipt of each event). After publishing, the drain waits until every accepted quiet event was received, at most %s (column drain: how long it took; the noisy counts, re-publishes and CPU cover publishing plus drain, so they depend on it). Share = quiet events received within %s of their scheduled time / quiet events accepted (202). Percentiles are over every accepted quiet event, those never received counting as infinitely late: \"> %s\" means not received by the end of the drain. Before each scenario %d events of a separate warm-up tenant are delivered, unmeasured.", senders, o.drain, shareWindow, o.drain, warmUpEvents),
		"Noisy attempts: attempts recorded in Postgres (sum of attempt_count; an attempt still hanging at the end is not recorded) and deliveries with at least one; noisy requests received: requests that reached the noisy endpoints (connections accepted by the hanging listeners, requests answered by the flood's receiver).",
		fmt.Sprintf("Re-publishes / delivery: the worker's %s (summed over reason) / %s (summed over labels: attempts recorded), scraped from its METRICS_ADDR at the end of the drain; n/a when the worker binary does not have the counter (a counter it has but does not show has not been incremented: 0). Postponements / delivery: %s / the same. postponed_count: from the deliveries table at the end, average and maximum per delivery of each group; it counts postponements by the circuit breaker and the rate limits (and inactive webhooks), not host_busy ones, which the worker also re-publishes. All three include the %d warm-up deliveries.", metricRepublishes, metricDeliveries, metricPostponed, warmUpEvents),
		fmt.Sprintf("CPU / delivery, from the first publish to the end of the drain, divided by the requests the healthy receivers answered 200 (quiet and flood): machine = busy jiffies of /proc/stat (user+nice+system+irq+softirq; tick-sampled, so short bursts on a half-idle machine are partly missed), hookline = utime+stime of the api, worker and dlq processes from /proc/<pid>/stat. Machine CPU includes Postgres, RabbitMQ, Redis, the receivers and the load generator. Others' CPU: cores used on average in the same window by processes outside the run (not this program, the hookline processes, the services or the run database's Postgres backends): other people's builds and tests on the machine; each scenario waits (at most -idle-wait) for the machine to be under %.1f cores busy before it publishes.", quietBusy),
		fmt.Sprintf("Tenants (setup): the tenants of the scenario, quiet and noisy, not counting the warm-up one, and how long creating them and their webhooks through the api took, before the measured window (e: %d tenants at a time over keep-alive connections, each tenant then its webhook). Worker RSS: VmRSS of the worker process from /proc/<pid>/status at the end of the drain, and VmHWM, its peak since it started (warm-up and setup included).", createParallel),
		fmt.Sprintf("Goals per noisy scenario: quiet share >= %.0f %% of solo's; quiet p99 <= %.0fx solo's or < %s; re-publishes per delivery <= %.0f.", goalShare*100, goalP99Factor, goalP99Absolute, goalRepublishes),
	}
}

// manyNote says how e ran and what it measured of its tenants one by one.
func manyNote(o options, r result) string {
	m, d := r.many, o.publishFor(r.sc)
	how := fmt.Sprintf("for %s (%d events: each tenant %s)", d, m.events, m.turns())
	if d > o.duration {
		how = fmt.Sprintf("for %s instead of %s, so that every tenant publishes (%d events: each tenant %s; a higher rate for %s would saturate this machine instead, see the package comment); the noisy tenants publish for the same %s, so they leave a larger backlog than in c, and solo's latencies are over %s, e's over %s",
			d, o.duration, m.events, m.turns(), o.duration, d, o.duration, d)
	}
	return fmt.Sprintf("%s: %d quiet tenants, each with one webhook at a path of its own (/hook/<index>) on one shared receiver that answers 200 at once (so under the same limit of requests in flight to one host:port as solo's single receiver), publishing in turn (event i by tenant i mod %d) at %g events/s together, solo's rate, so that solo is its baseline, %s. Setup: %s for %d tenants and their webhooks (%.0f tenants/s). Tenants with every event received within %s: %d of %d; requests on one tenant's webhook carrying another tenant's event: %d; duplicate receipts: %d.",
		r.sc.name, m.tenants, m.tenants, o.quietRate, how, seconds(r.setup), m.tenants, float64(m.tenants)/r.setup.Seconds(), shareWindow, m.kept, m.published, m.crossed, m.dups)
}

// seconds formats d to the tenth of a second.
func seconds(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// rowOf renders one scenario and its goal line ("" for solo, or when solo
// did not run).
func rowOf(o options, r result, solo *result) ([]string, string) {
	share := ratio(r.quietWithin, r.quietAccepted)
	p99, p99ok := percentile(r.quietLat, r.quietAccepted, 99)
	shareVsSolo, p99VsSolo := "n/a", "n/a"
	var shareRel, p99Rel float64 = -1, -1
	if solo != nil && r.sc.name != "solo" {
		if s := ratio(solo.quietWithin, solo.quietAccepted); s > 0 {
			shareRel = share / s
			shareVsSolo = fmt.Sprintf("%.1f %%", 100*shareRel)
		}
		if sp, ok := percentile(solo.quietLat, solo.quietAccepted, 99); ok && sp > 0 {
			p99VsSolo = "∞"
			if p99ok {
				p99Rel = float64(p99) / float64(sp)
				p99VsSolo = fmt.Sprintf("%.2fx", p99Rel)
			}
		}
	}
	noisy := r.stats["noisy"]
	repub, repubOK := perAttempt(r.metrics, metricRepublishes, o.republishesKnown)
	postp, postpOK := perAttempt(r.metrics, metricPostponed, true)
	row := []string{
		r.sc.name,
		fmt.Sprintf("%d (%s)", r.tenants, seconds(r.setup)),
		fmt.Sprintf("%d", r.quietAccepted),
		fmt.Sprintf("%.1f s", r.drained.Seconds()),
		fmt.Sprintf("%.1f %%", 100*share),
		shareVsSolo,
		latency(r, 50, o.drain),
		latency(r, 99, o.drain),
		p99VsSolo,
		dash(r.sc.hang || r.sc.flood, fmt.Sprintf("%d", r.noisyAccepted)),
		dash(r.sc.hang || r.sc.flood, fmt.Sprintf("%d (%d of %d)", noisy.attempts, noisy.attempted, noisy.deliveries)),
		dash(r.sc.hang || r.sc.flood, fmt.Sprintf("%d", r.noisyReached)),
		formatPer(repub, repubOK),
		formatPer(postp, postpOK),
		r.stats["quiet"].postponed(),
		dash(r.sc.hang || r.sc.flood, noisy.postponed()),
		perDelivery(r.cpu.busy, r.delivered),
		perDelivery(r.cpu.hookline, r.delivered),
		fmt.Sprintf("%.1f MiB (%.1f)", float64(r.workerRSS)/1024, float64(r.workerPeak)/1024),
		cores(r.othersTicks, r.window),
	}
	goals, line := goalsOf(r, shareRel, p99, p99ok, p99Rel, repub, repubOK, solo != nil && r.sc.name != "solo")
	return append(row, goals), line
}

// goalsOf renders the goal column and the goal line of a noisy scenario.
func goalsOf(r result, shareRel float64, p99 time.Duration, p99ok bool, p99Rel, repub float64, repubOK, vsSolo bool) (string, string) {
	repubMet := "n/a"
	if repubOK {
		repubMet = met(repub <= goalRepublishes)
	}
	if !vsSolo {
		return "-, -, " + repubMet, ""
	}
	shareMet := met(shareRel >= goalShare)
	p99Met := met(p99ok && (p99 < goalP99Absolute || (p99Rel >= 0 && p99Rel <= goalP99Factor)))
	p99Text := "never (not all received)"
	if p99ok {
		p99Text = fmt.Sprintf("%s = %.2fx solo", report.Ms(p99), p99Rel)
	}
	repubText := "n/a (counter not exported)"
	if repubOK {
		repubText = fmt.Sprintf("%.2f", repub)
	}
	line := fmt.Sprintf("Goals, %s: quiet share %.1f %% of solo (>= %.0f %%): %s; quiet p99 %s (<= %.0fx or < %s): %s; re-publishes per delivery %s (<= %.0f): %s.",
		r.sc.name, 100*shareRel, 100*goalShare, shareMet, p99Text, goalP99Factor, goalP99Absolute, p99Met, repubText, goalRepublishes, repubMet)
	return fmt.Sprintf("%s, %s, %s", shareMet, p99Met, repubMet), line
}

// percentile returns the p-th percentile of n events of which the sorted
// lat were received, the others counting as infinitely late (false).
func percentile(lat []time.Duration, n int64, p float64) (time.Duration, bool) {
	if n == 0 {
		return 0, false
	}
	i := int(float64(n-1) * p / 100)
	if i >= len(lat) {
		return 0, false
	}
	return lat[i], true
}

func latency(r result, p float64, drain time.Duration) string {
	d, ok := percentile(r.quietLat, r.quietAccepted, p)
	if !ok {
		return "> " + drain.String()
	}
	if d >= 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return report.Ms(d)
}

// perAttempt divides a counter by the attempts the worker counted; a
// counter absent from the scrape is 0 if known, else unknown (false).
func perAttempt(m map[string]float64, name string, known bool) (float64, bool) {
	v, ok := m[name]
	if !ok && !known || m[metricDeliveries] == 0 {
		return 0, false
	}
	return v / m[metricDeliveries], true
}

func formatPer(v float64, ok bool) string {
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func dash(show bool, s string) string {
	if !show {
		return "-"
	}
	return s
}

// codeVersion names the code being measured: the commit of src and how
// many files under cmd/ and internal/ differ from it.
func codeVersion(ctx context.Context, src string) string {
	git := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = src
		return cmd.Output()
	}
	rev, err := git("rev-parse", "--show-prefix", "--short", "HEAD")
	if err != nil || strings.TrimSpace(strings.Split(string(rev), "\n")[0]) != "" {
		return "source tree " + src + " (not the root of a git checkout)"
	}
	status, _ := git("status", "--porcelain", "--", "cmd", "internal")
	changed := 0
	for _, l := range strings.Split(string(status), "\n") {
		if strings.TrimSpace(l) != "" {
			changed++
		}
	}
	v := "commit " + strings.TrimSpace(strings.Split(string(rev), "\n")[1])
	if changed > 0 {
		v += fmt.Sprintf(" plus uncommitted changes to %d files under cmd/ and internal/", changed)
	}
	return v
}
