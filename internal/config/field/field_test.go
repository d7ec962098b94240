package field

import (
	"testing"
	"time"
)

func TestByteSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want ByteSize
		err  string
	}{
		{"65536", 65536, ""},
		{"64KiB", 64 << 10, ""},
		{"64KB", 64000, ""},
		{" 8 MiB ", 8 << 20, ""},
		{"1GB", 1_000_000_000, ""},
		{"12B", 12, ""},
		{"-1", 0, `"-1" is not a size (e.g. 65536, 64KiB, 8MB)`},
		{"lots", 0, `"lots" is not a size (e.g. 65536, 64KiB, 8MB)`},
		{"4TiB", 0, `"4TiB" is not a size (e.g. 65536, 64KiB, 8MB)`},
	} {
		var b ByteSize
		err := b.UnmarshalText([]byte(c.in))
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%q: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || b != c.want {
			t.Errorf("%q = %d, %v; want %d", c.in, b, err, c.want)
		}
	}
}

func TestChecks(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string // "" for nil
	}{
		{"at least, below", AtLeast("max_conns", 0, 1), "max_conns: 0 must be at least 1"},
		{"at least, equal", AtLeast("max_conns", 1, 1), ""},
		{"positive, zero", Positive("timeout", 0), "timeout: 0s must be positive"},
		{"positive", Positive("timeout", time.Second), ""},
		{"check, bad", Check(true, "k", "%q is wrong", "v"), `k: "v" is wrong`},
		{"check, good", Check(false, "k", "never"), ""},
		{"first of several", First(nil, AtLeast("a", 0, 1), AtLeast("b", 0, 1)), "a: 0 must be at least 1"},
		{"first of none", First(nil, nil), ""},
		{"prefix", Prefix("dns", AtLeast("attempts", 0, 1)), "dns.attempts: 0 must be at least 1"},
		{"prefix of the section itself", Prefix("radio", Errorf("", "sizes must not be negative")), "radio: sizes must not be negative"},
		{"host:port without port", HostPort("9.9.9.9", true), `"9.9.9.9" is not host:port`},
		{"host:port without host", HostPort(":53", true), `":53" has no host`},
		{"listen address", HostPort(":53", false), ""},
		{"port 0 to connect to", HostPort("1.1.1.1:0", true), `"1.1.1.1:0" has no valid port`},
		{"suffix", DomainSuffix(".cnn.com", false), ""},
		{"star", DomainSuffix("*", true), ""},
		{"star not allowed", DomainSuffix("*", false), `"*" is not a domain suffix (label "*")`},
		{"bad label", DomainSuffix("a..b", false), `"a..b" is not a domain suffix (label "")`},
	} {
		got := ""
		if c.err != nil {
			got = c.err.Error()
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
