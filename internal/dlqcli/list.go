package dlqcli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// lastErrorWidth is where the list truncates an entry's last error.
const lastErrorWidth = 60

func (a *app) list(ctx context.Context, args []string) int {
	c := a.newCommand("list", "[filters] [-limit N] [-all]",
		"Lists the dead-lettered deliveries matching the filters, oldest first,\nthen their counts by failure category.")
	var f Filter
	addFilterFlags(c.fs, &f)
	limit := c.fs.Int("limit", 0, "entries per page, 1 to 500 (default: the api's, 50)")
	all := c.fs.Bool("all", false, "list every page, not only the first")
	if _, code, ok := a.parse(c, args, 0); !ok {
		return code
	}
	if *limit < 0 || *limit > 500 {
		return a.usageFailure(c, usagef("-limit must be between 1 and 500"))
	}
	cl, err := a.client(c)
	if err != nil {
		return a.fail(c, err)
	}
	entries, more, err := fetchEntries(ctx, cl, f, *limit, *all)
	if err != nil {
		return a.fail(c, err)
	}
	counts, err := cl.Counts(ctx, f)
	if err != nil {
		return a.fail(c, err)
	}
	if err := printEntries(a.stdout, entries, more); err != nil {
		return a.fail(c, err)
	}
	fmt.Fprintln(a.stdout, formatCounts(counts))
	return exitOK
}

// fetchEntries reads the first page, or every page when all is set. more
// reports that pages were left unread.
func fetchEntries(ctx context.Context, cl *Client, f Filter, limit int, all bool) (entries []Entry, more bool, err error) {
	cursor := ""
	for {
		p, err := cl.List(ctx, f, limit, cursor)
		if err != nil {
			return nil, false, err
		}
		entries = append(entries, p.Data...)
		switch {
		case p.NextCursor == "":
			return entries, false, nil
		case !all:
			return entries, true, nil
		case p.NextCursor == cursor:
			return nil, false, fmt.Errorf("list: the api returned cursor %q twice", cursor)
		}
		cursor = p.NextCursor
	}
}

// printEntries writes the entries as an aligned table.
func printEntries(w io.Writer, entries []Entry, more bool) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintln(w, "No dead-lettered deliveries match.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DELIVERY\tEXHAUSTED AT\tWEBHOOK\tEVENT TYPE\tCATEGORY\tATTEMPTS\tLAST STATUS\tLAST ERROR")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.ID, formatTime(e.CompletedAt), e.WebhookID,
			dash(e.EventType), dash(e.FailureCategory), e.AttemptCount, formatStatus(e.LastStatusCode),
			dash(truncate(oneLine(e.LastError), lastErrorWidth)))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if more {
		_, err := fmt.Fprintln(w, "More entries follow: -all lists every page.")
		return err
	}
	return nil
}

// formatCounts is "Total: 12 (server_error 9, timeout 3)", the largest
// categories first.
func formatCounts(n Counts) string {
	type kv struct {
		k string
		v int64
	}
	cats := make([]kv, 0, len(n.ByCategory))
	for k, v := range n.ByCategory {
		cats = append(cats, kv{k, v})
	}
	slices.SortFunc(cats, func(x, y kv) int { return cmp.Or(cmp.Compare(y.v, x.v), cmp.Compare(x.k, y.k)) })
	parts := make([]string, len(cats))
	for i, c := range cats {
		parts[i] = fmt.Sprintf("%s %d", c.k, c.v)
	}
	s := fmt.Sprintf("Total: %d", n.Total)
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

func formatTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func formatStatus(code *int) string {
	if code == nil {
		return "-"
	}
	return strconv.Itoa(*code)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate shortens s to at most n runes, marking the cut with "...".
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}
