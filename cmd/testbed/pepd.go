package main

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"pep/testbed/run"
)

// pepdAliases are the per-key flags testbed run had before -pepd, kept
// for the command lines that use them: each is -pepd KEY=VALUE with its
// value written into Format (fmt verb %s). One row per flag; a new pepd
// key needs none (-pepd takes any key).
var pepdAliases = []struct {
	Flag, Key, Format, Usage string
}{
	{"dns-origins", "dns.origins", "%s", "keep (origins after the VIP) or drop (the VIP alone)"},
	{"opt-deadline", "optimize.deadline", "%s", "how long a response waits for its transform, e.g. 150ms"},
	{"pepd-radio", "radio", "{%s}", `socket options of subscriber connections as YAML entries, e.g. "congestion: bbr, notsent_lowat: 16384"`},
}

// addPepdFlags defines -pepd and its aliases on fs; each occurrence
// appends to *settings in command-line order (a later one of a key wins).
func addPepdFlags(fs *flag.FlagSet, settings *[]run.PepdSetting) {
	add := func(arg string) error {
		s, err := run.ParsePepdSetting(arg)
		if err != nil {
			return err
		}
		*settings = append(*settings, s)
		return nil
	}
	fs.Func("pepd", "KEY=VALUE: set a key of pepd's configuration (any dotted key of configs/pepd.yaml, e.g. optimize.deadline=150ms, hints.window=16, dns.origins=drop); repeatable; checked by pepd's loader before the run, recorded in results.json and the report", add)
	for _, a := range pepdAliases {
		fs.Func(a.Flag, fmt.Sprintf("the same as -pepd %s=%s: %s", a.Key, strings.ReplaceAll(a.Format, "%s", "V"), a.Usage), func(v string) error {
			return add(a.Key + "=" + fmt.Sprintf(a.Format, v))
		})
	}
}

// addVariantFlag defines -variant on fs: NAME:KEY=VALUE appends a pepd
// setting to variant NAME in *variants (run.Config.Variants), for the
// modes tagged @NAME; repeatable, in command-line order.
func addVariantFlag(fs *flag.FlagSet, variants *map[string][]run.PepdSetting) {
	fs.Func("variant", "NAME:KEY=VALUE: a pepd setting of the modes tagged @NAME only, written after -pepd's (e.g. -variant avif:optimize.avif=true -modes direct,url+opt,url+opt@avif -split-modes: the two pepd configurations as peers in one campaign); repeatable", func(arg string) error {
		name, kv, ok := strings.Cut(arg, ":")
		if !ok || name == "" {
			return fmt.Errorf("want NAME:KEY=VALUE, e.g. avif:optimize.avif=true")
		}
		s, err := run.ParsePepdSetting(kv)
		if err != nil {
			return err
		}
		if *variants == nil {
			*variants = map[string][]run.PepdSetting{}
		}
		(*variants)[name] = append((*variants)[name], s)
		return nil
	})
}

// variantsString is -variant's settings for the terminal: NAME:KEY=VALUE
// each, by name, space-separated; "" for none.
func variantsString(variants map[string][]run.PepdSetting) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(variants)) {
		for _, s := range variants[name] {
			out = append(out, name+":"+s.String())
		}
	}
	return strings.Join(out, " ")
}
