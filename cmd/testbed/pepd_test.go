package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"pep/testbed/run"
)

// TestPepdFlags: -pepd and its aliases become one list of settings in
// command-line order, each alias as the -pepd entry it stands for.
func TestPepdFlags(t *testing.T) {
	parse := func(args ...string) ([]string, error) {
		var got []run.PepdSetting
		fs := flag.NewFlagSet("testbed run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		addPepdFlags(fs, &got)
		err := fs.Parse(args)
		return run.PepdStrings(got), err
	}
	got, err := parse("-opt-deadline", "150ms", "-pepd", "hints.window=16", "-dns-origins", "drop",
		"-pepd-radio", "congestion: bbr, notsent_lowat: 16384", "-pepd", "optimize.deadline=200ms")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"optimize.deadline=150ms", "hints.window=16", "dns.origins=drop",
		"radio={congestion: bbr, notsent_lowat: 16384}", "optimize.deadline=200ms"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := parse("-pepd", "listen.admin=:1"); err == nil || !strings.Contains(err.Error(), "the testbed sets listen.admin itself") {
		t.Errorf("-pepd listen.admin: err %v", err)
	}
	if _, err := parse("-pepd", "deadline"); err == nil || !strings.Contains(err.Error(), "want KEY=VALUE") {
		t.Errorf("-pepd without =: err %v", err)
	}
}
