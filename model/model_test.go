package model

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestModel model-checks the protocol: every run of the file runs (the
// default group; with XA_MODEL_LARGE=1 the large group too) is verified
// with spin, through model/check, in a directory of its own. The model
// must hold exhaustively where a run expects "pass", and each mutation,
// probe and known counterexample must find its error. Without spin or gcc
// the test is skipped, unless CI=true.
func TestModel(t *testing.T) {
	for _, tool := range []string{"spin", "gcc", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed (scripts/deps installs spin): %v", tool, err)
			}
			t.Skipf("%s is not installed (scripts/deps installs spin; CI=true fails instead)", tool)
		}
	}
	runs, err := readRuns("runs")
	if err != nil {
		t.Fatal(err)
	}
	large := os.Getenv("XA_MODEL_LARGE") == "1"
	for _, r := range runs {
		if r.group == "large" && !large {
			continue
		}
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			args := append([]string{"-dir", t.TempDir()}, r.options...)
			out, err := exec.Command("./check", args...).CombinedOutput()
			if err != nil {
				t.Fatalf("model/check %s: %v\n%s", strings.Join(r.options, " "), err, out)
			}
			res, err := parsePan(string(out))
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			t.Logf("%s %s: errors %d, %d states, depth %d, pan %.1fs, %.1fs in all",
				r.expect, strings.Join(r.options, " "), res.errors, res.states, res.depth, res.seconds, time.Since(start).Seconds())
			switch r.expect {
			case "pass", "holds":
				if res.errors != 0 {
					t.Errorf("the model has %d error(s) (expected none); the counterexample:\n%s", res.errors, res.trace)
				}
				if !res.complete {
					t.Errorf("the search did not complete:\n%s", out)
				}
			case "fail", "reach", "known":
				if res.errors == 0 {
					t.Errorf("no counterexample (expected one: %s): %s", r.expect, why[r.expect])
				} else {
					t.Logf("%s\n%s", res.violation, res.trace)
				}
			default:
				t.Fatalf("unknown expectation %q", r.expect)
			}
		})
	}
}

var why = map[string]string{
	"fail":  "the mutation no longer bites: the model lost the behaviour that caught it",
	"reach": "the model no longer produces this event: part of it became vacuous",
	"known": "the known counterexample is gone: move the run to the passing ones and update docs/model.md",
}

// run is a line of the runs file.
type run struct {
	name, expect, group string
	options             []string
}

func readRuns(path string) ([]run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var runs []run
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) < 3 {
			return nil, fmt.Errorf("%s:%d: want name, expect, group and options", path, n)
		}
		runs = append(runs, run{name: fs[0], expect: fs[1], group: fs[2], options: fs[3:]})
	}
	return runs, sc.Err()
}

// panResult is what a verification found.
type panResult struct {
	errors    int
	states    int64
	depth     int
	seconds   float64
	complete  bool
	violation string // pan's first error line
	trace     string // the counterexample's events
}

var (
	reErrors  = regexp.MustCompile(`depth reached (\d+), errors: (\d+)`)
	reStates  = regexp.MustCompile(`(?m)^\s*(\d+) states, stored`)
	reElapsed = regexp.MustCompile(`(?m)^pan: elapsed time ([0-9.e+]+) seconds`)
	reFirst   = regexp.MustCompile(`(?m)^pan:1: .*$`)
)

func parsePan(out string) (panResult, error) {
	var r panResult
	m := reErrors.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no %q in pan's output", "errors: N")
	}
	r.depth, _ = strconv.Atoi(m[1])
	r.errors, _ = strconv.Atoi(m[2])
	if m := reStates.FindStringSubmatch(out); m != nil {
		r.states, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := reElapsed.FindStringSubmatch(out); m != nil {
		r.seconds, _ = strconv.ParseFloat(m[1], 64)
	}
	r.complete = !strings.Contains(out, "Search not completed") &&
		!strings.Contains(out, "max search depth too small") &&
		!strings.Contains(out, "out of memory") &&
		!strings.Contains(out, "MEMLIM")
	r.violation = reFirst.FindString(out)
	if _, tr, ok := strings.Cut(out, "== counterexample (spin -t)\n"); ok {
		r.trace = tr
	}
	return r, nil
}
