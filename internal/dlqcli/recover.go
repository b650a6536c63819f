package dlqcli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// RecoverRequest starts (or, with DryRun, counts) a webhook's recovery of
// what it failed or missed over a window of event times.
type RecoverRequest struct {
	From *time.Time `json:"from"`
	To   *time.Time `json:"to,omitempty"`
	// Include is failed, missed or both; empty leaves the api's default
	// (both).
	Include   []string  `json:"include,omitempty"`
	RateLimit RateLimit `json:"rate_limit"`
	Priority  string    `json:"priority,omitempty"`
	DryRun    bool      `json:"dry_run,omitempty"`
}

// Recovery is what a recovery covers; Failed and Missed are counted when it
// starts (or by a dry run), nil before and for what it does not include.
type Recovery struct {
	WebhookID string    `json:"webhook_id"`
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	Include   []string  `json:"include"`
	Failed    *int64    `json:"failed"`
	Missed    *int64    `json:"missed"`
}

// RecoveryCounts is the answer of a dry run.
type RecoveryCounts struct {
	Total    int64    `json:"total"`
	Recovery Recovery `json:"recovery"`
}

func recoverPath(webhookID string) string {
	return "/v1/webhooks/" + url.PathEscape(webhookID) + "/recover"
}

// Recover starts a recovery of the webhook and returns its batch operation
// id.
func (c *Client) Recover(ctx context.Context, webhookID string, req RecoverRequest) (string, error) {
	req.DryRun = false
	var out struct {
		BatchOperationID string `json:"batch_operation_id"`
	}
	if err := c.do(ctx, http.MethodPost, recoverPath(webhookID), nil, req, &out); err != nil {
		return "", err
	}
	return out.BatchOperationID, nil
}

// CountRecovery counts what a recovery of the webhook would cover now, and
// starts nothing.
func (c *Client) CountRecovery(ctx context.Context, webhookID string, req RecoverRequest) (RecoveryCounts, error) {
	req.DryRun = true
	var out RecoveryCounts
	err := c.do(ctx, http.MethodPost, recoverPath(webhookID), nil, req, &out)
	return out, err
}

// includeFlag is a comma-separated list of failed and missed.
type includeFlag []string

func (f *includeFlag) String() string { return strings.Join(*f, ",") }

func (f *includeFlag) Set(v string) error {
	*f = nil
	for _, part := range strings.Split(v, ",") {
		switch part = strings.TrimSpace(part); part {
		case "failed", "missed":
			*f = append(*f, part)
		default:
			return errors.New("must be failed, missed or failed,missed")
		}
	}
	return nil
}

func (a *app) recover(ctx context.Context, args []string) int {
	c := a.newCommand("recover", "-webhook ID -from TIME [-to TIME] [-include failed,missed] -rps N [-priority P] [-dry-run] [-follow]",
		"Recovers what a webhook failed or missed over a window of event times:\n"+
			"its exhausted deliveries not yet retried get a retry, and the events it\n"+
			"missed while disabled a delivery, each at most\n"+
			"once, at most N per second, as a batch operation run by the dlq service.\n"+
			"Prints its id; with -dry-run, only what it would cover.")
	webhook := c.fs.String("webhook", "", "`ID` of the webhook to recover (required)")
	var req RecoverRequest
	c.fs.Var(timeFlag{&req.From}, "from", "events published at or after this RFC 3339 `time` (required)")
	c.fs.Var(timeFlag{&req.To}, "to", "events published before this RFC 3339 `time` (default: now)")
	c.fs.Var((*includeFlag)(&req.Include), "include", "what to recover: `failed,missed` (default both)")
	c.fs.IntVar(&req.RateLimit.RequestsPerSecond, "rps", 0, "deliveries per second, `N` > 0 (required unless -dry-run)")
	var prio priorityFlag
	c.fs.Var(&prio, "priority", "`priority` of the new deliveries: high, normal or low (default: the api's)")
	dryRun := c.fs.Bool("dry-run", false, "count what the recovery would cover, and start nothing")
	follow := c.fs.Bool("follow", false, "follow the operation's progress until it ends, as status -follow")
	if _, code, ok := a.parse(c, args, 0); !ok {
		return code
	}
	switch {
	case *webhook == "":
		return a.usageFailure(c, usagef("-webhook is required"))
	case req.From == nil:
		return a.usageFailure(c, usagef("-from is required"))
	case !*dryRun && req.RateLimit.RequestsPerSecond <= 0:
		return a.usageFailure(c, usagef("-rps is required and must be positive"))
	}
	req.Priority = string(prio)
	cl, err := a.client(c)
	if err != nil {
		return a.fail(c, err)
	}
	if *dryRun {
		counts, err := cl.CountRecovery(ctx, *webhook, req)
		if err != nil {
			return a.fail(c, err)
		}
		printRecoveryCounts(a, counts)
		return exitOK
	}
	id, err := cl.Recover(ctx, *webhook, req)
	if err != nil {
		return a.fail(c, err)
	}
	fmt.Fprintln(a.stdout, id)
	if *follow {
		return a.follow(ctx, c, cl, id)
	}
	return exitOK
}

func printRecoveryCounts(a *app, counts RecoveryCounts) {
	r := counts.Recovery
	fmt.Fprintf(a.stdout, "window   %s to %s\n", r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339))
	if r.Failed != nil {
		fmt.Fprintf(a.stdout, "failed   %d\n", *r.Failed)
	}
	if r.Missed != nil {
		fmt.Fprintf(a.stdout, "missed   %d\n", *r.Missed)
	}
	fmt.Fprintf(a.stdout, "total    %d\n", counts.Total)
}
