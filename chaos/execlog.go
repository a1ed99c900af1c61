package chaos

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// execLogExt names the execution log files in a directory.
const execLogExt = ".exec"

// Execution is one line of an execution log: one run of a chaos.record
// handler that got as far as its effect (OK) or its failure.
type Execution struct {
	At      time.Time
	BatchID uint64
	Index   int
	Attempt int
	PID     int
	OK      bool
}

func (e Execution) line() string {
	res := "fail"
	if e.OK {
		res = "ok"
	}
	return fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%s\n", e.At.UnixNano(), e.BatchID, e.Index, e.Attempt, e.PID, res)
}

// parseExecution reads one line; a torn line (a process killed in the
// middle of writing it, before its sync) is an error.
func parseExecution(line string) (Execution, error) {
	f := strings.Split(line, "\t")
	if len(f) != 6 || (f[5] != "ok" && f[5] != "fail") {
		return Execution{}, fmt.Errorf("chaos: execution log line %q: expected 6 tab-separated fields ending in ok or fail", capped(line))
	}
	var n [5]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return Execution{}, fmt.Errorf("chaos: execution log line %q: field %d is not a number", capped(line), i+1)
		}
		n[i] = v
	}
	return Execution{At: time.Unix(0, n[0]), BatchID: uint64(n[1]), Index: int(n[2]), Attempt: int(n[3]), PID: int(n[4]), OK: f[5] == "ok"}, nil
}

// ReadExecutions reads every execution log in dir. Torn lines are skipped
// and counted: a line is written whole and synced before its effect counts.
func ReadExecutions(dir string) (out []Execution, torn int, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*"+execLogExt))
	if err != nil {
		return nil, 0, err
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, 0, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			e, err := parseExecution(sc.Text())
			if err != nil {
				torn++
				continue
			}
			out = append(out, e)
		}
		err = sc.Err()
		_ = f.Close() // read only: a close error loses nothing
		if err != nil {
			return nil, 0, fmt.Errorf("chaos: read %s: %w", name, err)
		}
	}
	return out, torn, nil
}

// capped shortens s for an error message.
func capped(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
