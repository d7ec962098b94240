package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name string
		args []string
		want string // a line of the output, or the error
		err  bool
	}{
		{"profiles", []string{"profiles"}, "paper-average        CDMA2000-1xRTT average cell, RTT 400 ms, 78 kbit/s TCP goodput\n", false},
		{"show", []string{"show", "lte"}, "  up:   delay=35ms rate=12mbit loss=0% queue=50p\n", false},
		{"plan", []string{"plan", "-ns", "radio", "-a", "ra", "-b", "rb", "paper-congested"},
			"tc -n radio qdisc replace dev rb root handle 1: netem limit 52 delay 300000us rate 58000bit -14\n", false},
		{"unknown profile", []string{"show", "nope"}, `netem: no built-in profile "nope"`, true},
		{"bad backend", []string{"run", "-backend", "kernel", "lte"}, `netem: backend "kernel": want auto, tc or userspace`, true},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`, true},
		{"no command", nil, "usage:", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(tc.args, &out, log)
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Fatalf("output lacks %q:\n%s", tc.want, out.String())
			}
		})
	}
}
