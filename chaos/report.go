package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report prints one scenario's runs as a table, with each failing run's
// problems under it.
func Report(w io.Writer, sc Scenario, results []*Result) {
	fmt.Fprintf(w, "\n== %s: %s\n", sc.Name, sc.About)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REP\tBATCHES\tCALLBACKS\tLOST\tWRONG\tDUPLICATES\tEDGE-DUPS\tLEFTOVERS\tDLQ\tVERDICT\tTIME\tKILLS")
	for _, r := range results {
		if r.Verdict == nil {
			fmt.Fprintf(tw, "%d\t-\t-\t-\t-\t-\t-\t-\t-\tERROR\t%s\t%s\n", r.Rep, r.Elapsed.Round(time.Second), counts(r.Kills))
			continue
		}
		v := r.Verdict
		verdict := "PASS"
		if !r.Passed() {
			verdict = "FAIL"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", r.Rep, v.Batches, v.Callbacks, v.Lost, v.Wrong,
			v.Duplicates, v.EdgeDuplicates, v.Leftovers, v.DLQ, verdict, r.Elapsed.Round(time.Second), counts(r.Kills))
	}
	_ = tw.Flush() // the report goes to a terminal or a buffer; nothing to do on a failed write
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(w, "  #%d harness error: %v\n", r.Rep, r.Err)
		}
		if r.Verdict != nil {
			if v := r.Verdict; v.Unanswered > 0 {
				fmt.Fprintf(w, "  #%d plain submissions without an answer: %d, of them recorded (and checked like the others): %d\n", r.Rep, v.Unanswered, v.UnansweredRecorded)
			}
			for _, p := range r.Verdict.Problems {
				fmt.Fprintf(w, "  #%d %s\n", r.Rep, p)
			}
		}
		if len(r.Exits) > 0 && !r.Passed() {
			if s := counts(r.Exits); s != "-" {
				fmt.Fprintf(w, "  #%d exits the suite did not cause: %s\n", r.Rep, s)
			}
		}
		if !r.Passed() {
			fmt.Fprintf(w, "  #%d logs, stores and execution logs: %s\n", r.Rep, r.Dir)
		}
	}
}

// counts renders per-kind counts as "processor:3 worker:1".
func counts(m map[string]int) string {
	var parts []string
	for k, n := range m {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", k, n))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// Summary prints the final line: "chaos: N passed, M failed".
func Summary(w io.Writer, results []*Result) (passed, failed int) {
	for _, r := range results {
		if r.Passed() {
			passed++
		} else {
			failed++
		}
	}
	fmt.Fprintf(w, "chaos: %d passed, %d failed\n", passed, failed)
	return passed, failed
}
