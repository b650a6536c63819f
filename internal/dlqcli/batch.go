package dlqcli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// barWidth is the width of the progress bar in cells.
const barWidth = 30

func (a *app) retry(ctx context.Context, args []string) int {
	c := a.newCommand("retry", "-webhook ID [-priority high|normal|low] DELIVERY_ID",
		"Retries one exhausted delivery as a new delivery of the same event and\nprints the new delivery's id. The exhausted delivery is kept as it is.")
	webhook := c.fs.String("webhook", "", "`ID` of the webhook the delivery belongs to (required)")
	var prio priorityFlag
	c.fs.Var(&prio, "priority", "`priority` of the new delivery: high, normal or low (default: the api's)")
	pos, code, ok := a.parse(c, args, 1)
	if !ok {
		return code
	}
	if *webhook == "" {
		return a.usageFailure(c, usagef("-webhook is required"))
	}
	cl, err := a.client(c)
	if err != nil {
		return a.fail(c, err)
	}
	id, err := cl.Retry(ctx, *webhook, pos[0], string(prio))
	if err != nil {
		return a.fail(c, err)
	}
	fmt.Fprintln(a.stdout, id)
	return exitOK
}

func (a *app) batch(ctx context.Context, args []string) int {
	c := a.newCommand("batch", "[filters] -rps N [-priority high|normal|low] [-follow]",
		"Retries every exhausted delivery matching the filters, at most N per\nsecond, as a batch operation run by the dlq service, and prints its id.\nAt least one filter is required.")
	var req BatchRequest
	addFilterFlags(c.fs, &req.Filter)
	c.fs.IntVar(&req.RateLimit.RequestsPerSecond, "rps", 0, "retries per second, `N` > 0 (required)")
	var prio priorityFlag
	c.fs.Var(&prio, "priority", "`priority` of the new deliveries: high, normal or low (default: the api's)")
	follow := c.fs.Bool("follow", false, "follow the operation's progress until it ends, as status -follow")
	if _, code, ok := a.parse(c, args, 0); !ok {
		return code
	}
	if req.Filter.Empty() {
		return a.usageFailure(c, usagef("refusing to retry the whole DLQ: give at least one of -webhook, -event-type, -category, -from, -to"))
	}
	if req.RateLimit.RequestsPerSecond <= 0 {
		return a.usageFailure(c, usagef("-rps is required and must be positive"))
	}
	req.Priority = string(prio)
	cl, err := a.client(c)
	if err != nil {
		return a.fail(c, err)
	}
	id, err := cl.StartBatch(ctx, req)
	if err != nil {
		return a.fail(c, err)
	}
	fmt.Fprintln(a.stdout, id)
	if *follow {
		return a.follow(ctx, c, cl, id)
	}
	return exitOK
}

func (a *app) status(ctx context.Context, args []string) int {
	c := a.newCommand("status", "[-follow] BATCH_ID",
		"Shows a batch operation. With -follow, polls it every second and draws\nits progress until it ends; the exit status is then 0 when it completed\nand 1 when it failed or was cancelled.")
	follow := c.fs.Bool("follow", false, "follow the progress until the operation ends")
	pos, code, ok := a.parse(c, args, 1)
	if !ok {
		return code
	}
	cl, err := a.client(c)
	if err != nil {
		return a.fail(c, err)
	}
	if *follow {
		return a.follow(ctx, c, cl, pos[0])
	}
	b, err := cl.Batch(ctx, pos[0])
	if err != nil {
		return a.fail(c, err)
	}
	printBatch(a.stdout, b)
	return exitOK
}

func (a *app) cancel(ctx context.Context, args []string) int {
	c := a.newCommand("cancel", "BATCH_ID",
		"Cancels a batch operation: retries not yet enqueued are not made.\nPrints the operation as it is after the cancel.")
	pos, code, ok := a.parse(c, args, 1)
	if !ok {
		return code
	}
	cl, err := a.client(c)
	if err != nil {
		return a.fail(c, err)
	}
	b, err := cl.Cancel(ctx, pos[0])
	if err != nil {
		return a.fail(c, err)
	}
	printBatch(a.stdout, b)
	return exitOK
}

// follow polls batch operation id every a.poll and draws its progress
// until it is final: 0 when it completed, 1 otherwise.
func (a *app) follow(ctx context.Context, c *command, cl *Client, id string) int {
	p := &progressLine{w: a.stdout, tty: a.tty}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return a.stopFollowing(p, id)
		case <-timer.C:
		}
		b, err := cl.Batch(ctx, id)
		if ctx.Err() != nil {
			return a.stopFollowing(p, id)
		}
		if err != nil {
			p.end()
			return a.fail(c, err)
		}
		p.draw(RenderProgress(b, barWidth))
		if b.Final() {
			p.end()
			return a.finalCode(id, b)
		}
		timer.Reset(a.poll)
	}
}

// stopFollowing reports an interrupted follow: the operation goes on.
func (a *app) stopFollowing(p *progressLine, id string) int {
	p.end()
	fmt.Fprintf(a.stderr, "dlq: stopped following; batch operation %s goes on (dlq status -follow %s)\n", id, id)
	return exitInterrupted
}

// finalCode is the exit code of a followed operation that ended.
func (a *app) finalCode(id string, b BatchOperation) int {
	switch b.State {
	case StateCompleted:
		return exitOK
	case StateFailed:
		fmt.Fprintf(a.stderr, "dlq: batch operation %s failed: %s\n", id, dash(oneLine(b.Error)))
	default:
		fmt.Fprintf(a.stderr, "dlq: batch operation %s was %s\n", id, b.State)
	}
	return exitFailure
}

// progressLine draws successive progress lines: on a terminal it redraws
// one line in place, elsewhere it writes a line per change.
type progressLine struct {
	w    io.Writer
	tty  bool
	last string
	open bool // a redrawn line awaits its newline
}

func (p *progressLine) draw(line string) {
	switch {
	case line == p.last:
		return
	case p.tty:
		pad := max(len(p.last)-len(line), 0)
		fmt.Fprint(p.w, "\r"+line+strings.Repeat(" ", pad))
		p.open = true
	default:
		fmt.Fprintln(p.w, line)
	}
	p.last = line
}

// end finishes a redrawn line so that what follows starts on a new one.
func (p *progressLine) end() {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
}

// printBatch writes a batch operation, one field a line.
func printBatch(w io.Writer, b BatchOperation) {
	fmt.Fprintf(w, "id           %s\n", b.ID)
	if r := b.Recovery; r != nil {
		fmt.Fprintf(w, "recovers     webhook %s, %s, events of %s to %s\n", r.WebhookID, strings.Join(r.Include, " and "),
			r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "state        %s\n", b.State)
	fmt.Fprintf(w, "progress     %s\n", RenderProgress(b, barWidth))
	fmt.Fprintf(w, "created at   %s\n", formatTime(&b.CreatedAt))
	fmt.Fprintf(w, "started at   %s\n", formatTime(b.StartedAt))
	fmt.Fprintf(w, "finished at  %s\n", formatTime(b.FinishedAt))
	if b.Error != "" {
		fmt.Fprintf(w, "error        %s\n", oneLine(b.Error))
	}
}
