package run

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pep/internal/config"
)

func TestParsePepdSetting(t *testing.T) {
	for _, tc := range []struct {
		arg, key, value, err string
	}{
		{arg: "optimize.deadline=150ms", key: "optimize.deadline", value: "150ms"},
		{arg: "https.max_streams=50", key: "https.max_streams", value: "50"},
		{arg: "radio={congestion: bbr}", key: "radio", value: "{congestion: bbr}"},
		{arg: "optimize.exclude_file=", key: "optimize.exclude_file", value: ""},
		{arg: "guard.allow=[a=b]", key: "guard.allow", value: "[a=b]"},
		{arg: "optimize.deadline", err: `run: -pepd "optimize.deadline": want KEY=VALUE, KEY a dotted pepd.yaml key (optimize.deadline=150ms)`},
		{arg: "=1", err: `run: -pepd "=1": want KEY=VALUE, KEY a dotted pepd.yaml key (optimize.deadline=150ms)`},
		{arg: "optimize..deadline=1s", err: `run: -pepd "optimize..deadline=1s": key "optimize..deadline" has an empty segment`},
		{arg: "listen.http=:80", err: `run: -pepd "listen.http=:80": the testbed sets listen.http itself (nftables steers port 80 to it)`},
		{arg: "listen={}", err: `run: -pepd "listen={}": the testbed sets listen itself (nftables steers port 80 to it)`},
		{arg: "https.shards=3", err: `run: -pepd "https.shards=3": the testbed sets https.shards itself (the url-https-kN modes set it)`},
		{arg: "mode=url", err: `run: -pepd "mode=url": the testbed sets mode itself (each session's mode sets it)`},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			s, err := ParsePepdSetting(tc.arg)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.err {
				t.Fatalf("error %q, want %q", got, tc.err)
			}
			if err == nil && (s.Key != tc.key || s.Value != tc.value || s.String() != tc.arg) {
				t.Errorf("got %q = %q (%s), want %q = %q", s.Key, s.Value, s, tc.key, tc.value)
			}
		})
	}
}

// TestPepdSettingsReachPepd: -pepd settings land in the generated
// pepd.yaml as pepd's own loader reads it: keys the testbed never heard
// of (hints.window, cache.window in a section the base file lacks), a
// flow mapping, the later of two settings of one key, an empty value.
func TestPepdSettingsReachPepd(t *testing.T) {
	b, err := PepdConfig(fixedTopo(), PepdSettings{Overrides: []PepdSetting{
		{"optimize.deadline", "150ms"}, {"hints.window", "16"}, {"cache.window", "2h"},
		{"radio", "{congestion: bbr, notsent_lowat: 16384}"}, {"optimize.deadline", "250ms"}, {"optimize.exclude_file", ""},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse("pepd.yaml", b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if c.Optimize.Deadline != 250*time.Millisecond {
		t.Errorf("optimize.deadline %s, want 250ms (the later setting)", c.Optimize.Deadline)
	}
	if c.Hints.Window != 16 {
		t.Errorf("hints.window %d, want 16", c.Hints.Window)
	}
	if c.Cache.Window != 2*time.Hour {
		t.Errorf("cache.window %s, want 2h", c.Cache.Window)
	}
	if c.Radio.Congestion != "bbr" || c.Radio.NotsentLowat != 16384 {
		t.Errorf("radio %+v, want congestion bbr, notsent_lowat 16384", c.Radio)
	}
	// The testbed's own keys are still there.
	if c.Listen.HTTP != ":3129" || c.Optimize.Listen != PepdOptimizer || c.VIP.String() != "192.0.2.12" {
		t.Errorf("testbed keys lost: listen.http %q, optimize.listen %q, vip %s\n%s", c.Listen.HTTP, c.Optimize.Listen, c.VIP, b)
	}
	if _, err := PepdConfig(fixedTopo(), PepdSettings{Overrides: []PepdSetting{{"log.level.x", "1"}}}); err == nil ||
		err.Error() != "run: -pepd log.level.x=1: log.level is not a section of pepd.yaml" {
		t.Errorf("a key through a scalar: %v", err)
	}
}

// TestValidatePepd: an unknown or bad -pepd key fails before the run with
// pepd's loader's error (file, line, key, nearest known key), and the file
// it names is there to read; a setting that only breaks the config a
// url-https-kN mode writes is caught too.
func TestValidatePepd(t *testing.T) {
	modes := []string{"direct", "url", "url-https-k3", "url-https-k3+opt"}
	for _, tc := range []struct {
		name string
		set  []PepdSetting
		err  string // after the folder
	}{
		{"known keys", []PepdSetting{{"optimize.deadline", "150ms"}, {"dns.origins", "drop"}}, ""},
		{"unknown key", []PepdSetting{{"optimize.dedline", "150ms"}}, `/pepd.yaml:16: optimize: unknown key "dedline" (did you mean "deadline"?)`},
		{"unknown section", []PepdSetting{{"optimise.deadline", "150ms"}}, `/pepd.yaml:26: top level: unknown key "optimise" (did you mean "optimize"?)`},
		{"bad value", []PepdSetting{{"optimize.deadline", "fast"}}, "/pepd.yaml:16: optimize.deadline: cannot unmarshal !!str `fast` into time.Duration"},
		{"invalid value", []PepdSetting{{"dns.origins", "sometimes"}}, `/pepd.yaml:18: dns.origins: "sometimes" is not one of keep, drop`},
		{"https mode", []PepdSetting{{"https.shard_ports", "[443, 8443]"}}, "/pepd-url-https-k3.yaml:24: https.shard_ports: 2 ports for 3 shards"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := ValidatePepd(filepath.Join(dir, "pepd.yaml"), fixedTopo(), modes, tc.set)
			got := ""
			if err != nil {
				got = strings.Replace(err.Error(), "run: -pepd: "+dir, "", 1)
			}
			if got != tc.err {
				t.Fatalf("error %q, want %q", got, tc.err)
			}
			if _, err := os.Stat(filepath.Join(dir, "pepd.yaml")); err != nil {
				t.Errorf("the run's pepd.yaml is not kept: %v", err)
			}
		})
	}
}
