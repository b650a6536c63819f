package dlqcli

import (
	"fmt"
	"strings"
)

// RenderProgress draws a batch operation on one line: a bar width cells
// wide filled in proportion of processed to total, the percentage (rounded
// down, so 100 % means done), the counts and the state, for example
//
//	[########------------]  40% 40/100 running (succeeded 30, failed 5, skipped 5)
//
// A completed operation that had nothing to do shows a full bar. The
// operation's error, if any, ends the line.
func RenderProgress(b BatchOperation, width int) string {
	width = max(width, 1)
	done, total := max(b.Processed, 0), max(b.Total, 0)
	if done > total {
		done = total
	}
	var pct, cells int64
	switch {
	case total > 0:
		pct, cells = done*100/total, done*int64(width)/total
	case b.State == StateCompleted:
		pct, cells = 100, int64(width)
	}
	var sb strings.Builder
	sb.WriteString("[")
	sb.WriteString(strings.Repeat("#", int(cells)))
	sb.WriteString(strings.Repeat("-", width-int(cells)))
	fmt.Fprintf(&sb, "] %3d%% %d/%d %s (succeeded %d, failed %d, skipped %d)",
		pct, b.Processed, b.Total, b.State, b.Succeeded, b.Failed, b.Skipped)
	if b.Error != "" {
		sb.WriteString(": ")
		sb.WriteString(oneLine(b.Error))
	}
	return sb.String()
}

// oneLine folds line breaks and tabs into spaces so that a message cannot
// break a table or a redrawn line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
