package run

import (
	"bytes"
	"strings"
	"testing"
)

// TestProgressPlain: a Progress on a non-terminal writer (a redirected log)
// writes whole lines, one per 5 % of the loads, and no carriage returns.
func TestProgressPlain(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(40, &buf)
	for i := 0; i < 40; i++ {
		p.Describe("3g url run 1 page")
		p.Add(1)
	}
	p.Finish()
	out := buf.String()
	if strings.Contains(out, "\r") {
		t.Fatalf("carriage return in a plain progress log: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 21 { // the start line and one per 2 loads
		t.Fatalf("%d lines, want 21:\n%s", len(lines), out)
	}
	if !strings.HasPrefix(lines[20], "testbed: 40/40 loads (100 %)") {
		t.Errorf("last line %q", lines[20])
	}
	var nilP *Progress
	nilP.Describe("x")
	nilP.Add(1)
	nilP.Finish()
	if NewProgress(10, nil) != nil {
		t.Error("NewProgress(nil writer) is not nil")
	}
}
