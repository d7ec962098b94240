package run

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"pep/internal/config"
	"pep/testbed/topo"
)

// PepdSetting is one key of pepd's configuration a run sets (`testbed run
// -pepd KEY=VALUE`): Key is a dotted path of configs/pepd.yaml
// ("optimize.deadline", "radio.congestion", "dns.origins"), Value is YAML
// ("150ms", "3", "[a, b]", "{congestion: bbr}"). The testbed knows no key:
// it writes Value at Key in the pepd.yaml it generates, and pepd's own
// loader (internal/config) judges the result, so a key a component adds
// needs nothing here.
type PepdSetting struct {
	Key, Value string
}

// String is the setting as -pepd takes it: KEY=VALUE.
func (s PepdSetting) String() string { return s.Key + "=" + s.Value }

// ParsePepdSetting reads one -pepd argument, KEY=VALUE. KEY is dotted
// path segments, none empty; VALUE may be empty (an empty string) and may
// hold '='. A key the testbed itself sets (PepdOwnedKeys) is an error
// naming what sets it; whether pepd knows the key is checked later, by
// pepd's loader (ValidatePepd).
func ParsePepdSetting(arg string) (PepdSetting, error) {
	key, value, ok := strings.Cut(arg, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return PepdSetting{}, fmt.Errorf("run: -pepd %q: want KEY=VALUE, KEY a dotted pepd.yaml key (optimize.deadline=150ms)", arg)
	}
	for _, seg := range strings.Split(key, ".") {
		if seg == "" {
			return PepdSetting{}, fmt.Errorf("run: -pepd %q: key %q has an empty segment", arg, key)
		}
	}
	if why := pepdOwned(key); why != "" {
		return PepdSetting{}, fmt.Errorf("run: -pepd %q: the testbed sets %s itself (%s)", arg, key, why)
	}
	return PepdSetting{Key: key, Value: value}, nil
}

// PepdOwnedKeys are the pepd keys the testbed writes itself, with why: the
// namespaces' addresses, the ports nftables steers to, Squid's parent, and
// the switches each session's mode sets. -pepd may not set them, nor a
// section holding one of them as a whole.
var PepdOwnedKeys = []struct{ Key, Why string }{
	{"mode", "each session's mode sets it"},
	{"vip", "-vip"},
	{"subscribers", "the phone's address in the testbed"},
	{"resolvers", "the testbed's carrier resolver"},
	{"squid", "the testbed's Squid"},
	{"squid_proxy_protocol", "the testbed's squid.conf requires the PROXY header"},
	{"listen.http", "nftables steers port 80 to it"},
	{"listen.tls", "nftables steers VIP:443 to it"},
	{"listen.dns", "nftables steers port 53 to it in dns mode"},
	{"listen.admin", "the runner switches modes through it"},
	{"listen.squid_dns", "the testbed's squid.conf asks it first"},
	{"optimize.listen", "the testbed's squid.conf has it as Squid's parent"},
	{"optimize.enabled", "the +opt modes switch it per session"},
	{"hints.enabled", "the +hints modes switch it per session"},
	{"https.cert_file", "the testbed issues the VIP's certificate"},
	{"https.key_file", "the testbed issues the VIP's certificate"},
	{"https.urls", "the url-https-kN modes set it"},
	{"https.shards", "the url-https-kN modes set it"},
}

// pepdOwned returns why the testbed owns key, or "" if it does not: key
// is an owned key, inside one, or a section holding one.
func pepdOwned(key string) string {
	for _, o := range PepdOwnedKeys {
		if key == o.Key || strings.HasPrefix(key, o.Key+".") || strings.HasPrefix(o.Key, key+".") {
			return o.Why
		}
	}
	return ""
}

// setPepd writes each setting into the YAML document doc, in order (a
// later setting of the same key wins): the mappings on the way are made
// when missing, the value replaces what was there. Errors name the
// setting: a key through a value that is not a mapping, a value that is
// not YAML.
func setPepd(doc []byte, settings []PepdSetting) ([]byte, error) {
	if len(settings) == 0 {
		return doc, nil
	}
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("run: pepd.yaml: %w", err)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("run: pepd.yaml: not a mapping")
	}
	for _, s := range settings {
		var v yaml.Node
		if err := yaml.Unmarshal([]byte(s.Value), &v); err != nil {
			return nil, fmt.Errorf("run: -pepd %s: value: %w", s, err)
		}
		val := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ""} // KEY= is the empty string
		if len(v.Content) == 1 {
			val = v.Content[0]
		}
		val.Style &^= yaml.FlowStyle | yaml.LiteralStyle | yaml.FoldedStyle
		if val.Kind == yaml.MappingNode || val.Kind == yaml.SequenceNode {
			val.Style = yaml.FlowStyle // as given on the command line
		}
		m := root.Content[0]
		segs := strings.Split(s.Key, ".")
		for i, seg := range segs {
			var cur *yaml.Node
			for j := 0; j+1 < len(m.Content); j += 2 {
				if m.Content[j].Value == seg {
					cur = m.Content[j+1]
					if i == len(segs)-1 {
						m.Content[j+1] = val
					}
					break
				}
			}
			if i == len(segs)-1 {
				if cur == nil {
					m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: seg}, val)
				}
				break
			}
			if cur == nil {
				cur = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: seg}, cur)
			}
			if cur.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("run: -pepd %s: %s is not a section of pepd.yaml", s, strings.Join(segs[:i+1], "."))
			}
			m = cur
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, fmt.Errorf("run: pepd.yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("run: pepd.yaml: %w", err)
	}
	return b.Bytes(), nil
}

// ValidatePepd writes the pepd.yaml of every pepd state the run goes
// through (mode off at start, and https.urls and shards of each
// url-https-kN mode; the certificate files named but not made) for a
// testbed at tc, and loads each with pepd's own loader (internal/config).
// Each is written and loaded from there, as the run's record of pepd's
// configuration: the first at path, the others beside it with the mode
// in the name (pepd-url-https-k3.yaml); a bed's own files differ only in
// the testbed's name and the certificate's paths. An unknown or bad key is
// pepd's error: the file, the line, the key and, for a typo, the nearest
// known key.
func ValidatePepd(path string, tc topo.Config, modes []string, settings []PepdSetting) error {
	states := []PepdSettings{{Overrides: settings}}
	if anyHTTPS(modes) {
		states[0].CertFile, states[0].KeyFile = "vip-cert.pem", "vip-key.pem"
		seen := map[int]bool{}
		for _, m := range modes {
			base, _ := SplitMode(m)
			if k, ok := HTTPSMode(base); ok && !seen[k] {
				seen[k] = true
				s := states[0]
				s.HTTPSURLs, s.Shards = true, k
				states = append(states, s)
			}
		}
	}
	for i, s := range states {
		b, err := PepdConfig(tc, s)
		if err != nil {
			return err
		}
		p := path
		if i > 0 {
			p = strings.TrimSuffix(path, ".yaml") + fmt.Sprintf("-%s%d.yaml", HTTPSPrefix, s.Shards)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("run: %w", err)
		}
		if _, err := config.Load(p); err != nil {
			return fmt.Errorf("run: -pepd: %w", err)
		}
	}
	return nil
}
