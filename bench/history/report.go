package main

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"
)

// goal is the read target: at most 50 ms at p99, warm.
const goal = 50 * time.Millisecond

func printReport(o options, sizes Sizes, results []result) {
	fmt.Printf("\nReads against %s (%d samples each, warm)\n\n", sizes, o.samples)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "read\tp50 ms\tp99 ms\tmax ms\tgoal p99 <= 50 ms")
	met := 0
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(w, "%s\t\t\t\tfailed: %v\n", r.name, r.err)
			continue
		}
		verdict := "met"
		if r.p99 > goal {
			verdict = "NOT met"
		} else {
			met++
		}
		fmt.Fprintf(w, "%s\t%.1f\t%.1f\t%.1f\t%s\n", r.name, ms(r.p50), ms(r.p99), ms(r.max), verdict)
	}
	w.Flush()
	fmt.Printf("\n%d of %d reads within the goal\n", met, len(results))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
