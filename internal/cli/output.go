package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// printer writes what a command found: as tables and sentences for people,
// or as one JSON document for scripts (--output json). It is chosen once,
// before any command runs (g.out); commands describe their result as a
// value with JSON tags and say how to show it to people.
type printer struct {
	json   bool
	stdout io.Writer
	stderr io.Writer
}

// newPrinter reads --output (or $XACTL_OUTPUT).
func (g *globals) newPrinter() (*printer, error) {
	o := g.output
	if o == "" {
		o = g.getenv("XACTL_OUTPUT")
	}
	p := &printer{stdout: g.stdout, stderr: g.stderr}
	switch o {
	case "", "table":
	case "json":
		p.json = true
	default:
		return nil, usageErr("--output %q: want table or json", o)
	}
	return p, nil
}

// result prints v: as indented JSON, or by calling human with stdout.
func (p *printer) result(v any, human func(w io.Writer)) error {
	if p.json {
		enc := json.NewEncoder(p.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	human(p.stdout)
	return nil
}

// line prints v as result does, but JSON as one compact document on one
// line: a stream of results (recover --watch) is JSON Lines.
func (p *printer) line(v any, human func(w io.Writer)) error {
	if p.json {
		return json.NewEncoder(p.stdout).Encode(v)
	}
	human(p.stdout)
	return nil
}

// errors prints errs for people, on stderr; in JSON they are part of the
// result.
func (p *printer) errors(errs []string) {
	if p.json {
		return
	}
	for _, e := range errs {
		fmt.Fprintln(p.stderr, "error:", e)
	}
}

// table starts a table on w; rows are tab-separated; call Flush.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 2, 4, 2, ' ', 0) }

// errStrings returns errs as text, never nil (JSON: []).
func errStrings(errs []error) []string {
	out := []string{}
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// timeText formats t for output.
func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// plural returns "n thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, thing)
	}
	switch {
	case strings.HasSuffix(thing, "y") && !strings.HasSuffix(thing, "ey"):
		return fmt.Sprintf("%d %sies", n, thing[:len(thing)-1])
	case strings.HasSuffix(thing, "ch") || strings.HasSuffix(thing, "s") || strings.HasSuffix(thing, "x"):
		return fmt.Sprintf("%d %ses", n, thing)
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
