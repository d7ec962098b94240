package netem

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseBitrate(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Bitrate
		err      string
	}{
		{"kbit", "78kbit", 78000, ""},
		{"decimal mbit", "1.6mbit", 1600000, ""},
		{"per second with space", "12 Mbit/s", 12000000, ""},
		{"bare bits", "1638400bit", 1638400, ""},
		{"unlimited", "unlimited", 0, ""},
		{"zero", "0", 0, ""},
		{"gbit", "1gbit", 1000000000, ""},
		{"kbps refused", "78kbps", 0, `"78kbps" is ambiguous`},
		{"KB/s refused", "10KB/s", 0, `"10KB/s" is ambiguous`},
		{"no unit", "78", 0, `"78" has no unit`},
		{"negative", "-5kbit", 0, `"-5kbit" is negative`},
		{"garbage", "fastkbit", 0, `"fastkbit" is not a rate`},
		{"sub-bit", "0.5bit", 0, `"0.5bit" is below 1 bit/s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseBitrate(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseBitrate(%q) error = %v, want containing %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseBitrate(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestBitrateTxTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate Bitrate
		n    int
		want time.Duration
	}{
		{"1500B at 12mbit", 12 * MbitPerSecond, 1500, time.Millisecond},
		{"1500B at 81kbit", 81 * KbitPerSecond, 1500, 148148149 * time.Nanosecond},
		{"64B at 58kbit", 58 * KbitPerSecond, 64, 8827587 * time.Nanosecond},
		{"unlimited", 0, 1500, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rate.TxTime(tc.n); got != tc.want {
				t.Fatalf("TxTime = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBuiltinProfiles(t *testing.T) {
	names := Profiles()
	want := []string{"2g", "3g", "4g", "edge", "fast", "h2a-rtt0-loss0", "h2a-rtt0-loss2", "h2a-rtt100-loss0",
		"h2a-rtt100-loss2", "h2a-rtt300-loss0", "h2a-rtt300-loss2", "lighthouse-slow4g", "lte", "origin-20ms", "paper-average", "paper-congested"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("Profiles() = %v, want %v", names, want)
	}
	for _, n := range names {
		p, err := LoadProfile(n)
		if err != nil {
			t.Fatalf("LoadProfile(%q): %v", n, err)
		}
		if p.Name != n || p.Source == "" || p.Description == "" {
			t.Errorf("%s: name %q, source %q, description %q: want the file name and both texts", n, p.Name, p.Source, p.Description)
		}
	}
	// The figures the rest of the project relies on, written out.
	for _, tc := range []struct {
		name     string
		rtt      time.Duration
		up, down Bitrate
		loss     float64
	}{
		{"paper-average", 400 * time.Millisecond, 81000, 81000, 0},
		{"paper-congested", 600 * time.Millisecond, 58000, 58000, 0},
		{"lte", 70 * time.Millisecond, 12000000, 12000000, 0},
		{"3g", 300 * time.Millisecond, 768000, 1600000, 0},
		{"edge", 840 * time.Millisecond, 200000, 240000, 0},
		{"lighthouse-slow4g", 150 * time.Millisecond, 768000, 1638400, 0},
		{"h2a-rtt300-loss2", 300 * time.Millisecond, 0, 0, 0.02},
		{"fast", 20 * time.Millisecond, 20000000, 20000000, 0},
	} {
		p, err := LoadProfile(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if p.RTT() != tc.rtt || p.Up.Rate != tc.up || p.Down.Rate != tc.down || p.Down.Loss.Mean() != tc.loss {
			t.Errorf("%s = %v, want rtt %v up %v down %v loss %v", tc.name, p, tc.rtt, tc.up, tc.down, tc.loss)
		}
	}
}

func TestParseProfile(t *testing.T) {
	p, err := ParseProfile("x.yaml", []byte(`
name: bursty
description: test
up:
  delay: 100ms
  jitter: 10ms
  rate: 1mbit
  loss:
    gilbert_elliott: {p: 1%, r: 25%, loss_bad: 50%}
  queue: {bytes: 64KiB}
down:
  delay: 0ms
`))
	if err != nil {
		t.Fatal(err)
	}
	want := "bursty up{delay=100ms jitter=10ms rate=1mbit loss=ge(p=1%,r=25%,bad=50%,good=0%) queue=65536B} down{delay=0s rate=unlimited loss=0% queue=1000p}"
	if p.String() != want {
		t.Fatalf("got  %s\nwant %s", p, want)
	}
	// Stationary loss: p/(p+r) * 50% = 0.01/0.26*0.5.
	if got, want := p.Up.Loss.Mean(), 0.01/0.26*0.5; got != want {
		t.Fatalf("GE mean = %v, want %v", got, want)
	}
}

func TestParseProfileErrors(t *testing.T) {
	const ok = "down:\n  delay: 1ms\n"
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"bad rate unit", "up:\n  delay: 200ms\n  rate: 78kbps\n" + ok,
			`netem: bad.yaml:3: up.rate: "78kbps" is ambiguous: write the rate in bits, e.g. "78kbit"`},
		{"unknown key", "up:\n  delay: 200ms\n  bandwidth: 1mbit\n" + ok,
			`netem: bad.yaml:3: up.bandwidth: unknown key (want one of delay, jitter, rate, loss, queue)`},
		{"missing delay", "up:\n  rate: 1mbit\n" + ok,
			`netem: bad.yaml:2: up.delay: missing: write "0ms" for none`},
		{"missing direction", "up:\n  delay: 1ms\n",
			`netem: bad.yaml:1: down: missing: a profile gives both directions`},
		{"loss without percent", "up:\n  delay: 1ms\n  loss: {random: 0.02}\n" + ok,
			`netem: bad.yaml:3: up.loss.random: "0.02" is not a percentage: write it with a % sign, e.g. "2%"`},
		{"loss over 100", "up:\n  delay: 1ms\n  loss: {random: 120%}\n" + ok,
			`netem: bad.yaml:3: up.loss.random: "120%" is outside 0%..100%`},
		{"two loss models", "up:\n  delay: 1ms\n  loss: {random: 1%, gilbert_elliott: {p: 1%, r: 1%}}\n" + ok,
			`netem: bad.yaml:3: up.loss: give either random or gilbert_elliott, not both`},
		{"ge missing r", "up:\n  delay: 1ms\n  loss:\n    gilbert_elliott: {p: 1%}\n" + ok,
			`netem: bad.yaml:4: up.loss.gilbert_elliott.r: missing`},
		{"jitter above delay", "up:\n  delay: 10ms\n  jitter: 20ms\n" + ok,
			`netem: bad.yaml:3: up.jitter: 20ms is larger than the delay 10ms`},
		{"bad duration", "up:\n  delay: 200\n" + ok,
			`netem: bad.yaml:2: up.delay: "200" is not a duration: want e.g. "200ms"`},
		{"both queue kinds", "up:\n  delay: 1ms\n  queue: {packets: 10, bytes: 3000}\n" + ok,
			`netem: bad.yaml:3: up.queue: give exactly one of packets and bytes`},
		{"queue too small", "up:\n  delay: 1ms\n  queue: {bytes: 100}\n" + ok,
			`netem: bad.yaml:3: up.queue.bytes: "100" cannot hold one 1500-byte packet`},
		{"duplicate key", "up:\n  delay: 1ms\n  delay: 2ms\n" + ok,
			`netem: bad.yaml:3: up.delay: given twice`},
		{"rate too low", "up:\n  delay: 1ms\n  rate: 1kbit\n" + ok,
			`netem: bad.yaml:3: up.rate: "1kbit" is below 8kbit: a 1500-byte packet would take over 1.5 s`},
		{"not a mapping", "- up\n- down\n",
			`netem: bad.yaml:1: want a mapping with keys name, description, source, up, down`},
		{"yaml syntax", "up:\n  delay: [1ms\n",
			`netem: bad.yaml:1: not valid YAML: yaml: line 1: did not find expected ',' or ']'`},
		{"empty", "",
			`netem: bad.yaml: empty file`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseProfile("bad.yaml", []byte(tc.doc))
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if err.Error() != tc.want {
				t.Fatalf("error\n got %q\nwant %q", err.Error(), tc.want)
			}
			var pe *ProfileError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ProfileError", err)
			}
		})
	}
}

func TestLoadProfileFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(path, []byte("up:\n  delay: 5ms\ndown:\n  delay: 5ms\n  rate: 1mbit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := LoadProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "mine" || p.File != path || p.Down.Rate != MbitPerSecond {
		t.Fatalf("got %+v", p)
	}
	if _, err := LoadProfile("no-such-profile"); err == nil || !strings.Contains(err.Error(), `netem: no built-in profile "no-such-profile" (have 2g, 3g`) {
		t.Fatalf("unknown name: err = %v", err)
	}
	if _, err := LoadProfile(filepath.Join(dir, "absent.yaml")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("absent file: err = %v", err)
	}
}

func FuzzParseProfile(f *testing.F) {
	for _, n := range Profiles() {
		data, err := builtin.ReadFile("profiles/" + n + ".yaml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("up: {delay: 1ms, loss: {gilbert_elliott: {p: 1%, r: 0%}}}\ndown: {delay: 1ms}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProfile("fuzz.yaml", data)
		if err != nil {
			var pe *ProfileError
			if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), "netem: fuzz.yaml") {
				t.Fatalf("error %q is not a ProfileError naming the file", err)
			}
			return
		}
		for _, d := range []Direction{p.Up, p.Down} {
			if d.Delay < 0 || d.Jitter > d.Delay || d.Loss.Mean() < 0 || d.Loss.Mean() > 1 {
				t.Fatalf("accepted an invalid direction: %v", d)
			}
		}
	})
}
