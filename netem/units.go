package netem

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Bitrate is a link rate in bits per second. Zero means unlimited (no
// serialization delay). Prefixes are decimal (SI), as in tc(8): 1 kbit = 1000 bit/s.
type Bitrate uint64

// Common rates.
const (
	BitPerSecond  Bitrate = 1
	KbitPerSecond Bitrate = 1000
	MbitPerSecond Bitrate = 1000 * 1000
	GbitPerSecond Bitrate = 1000 * 1000 * 1000
)

var bitrateUnits = []struct {
	suffix string
	mult   float64
}{
	// Longest suffixes first so that "kbit/s" is not read as "kbit" + "/s".
	{"gbit/s", 1e9}, {"mbit/s", 1e6}, {"kbit/s", 1e3}, {"bit/s", 1},
	{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
}

// ParseBitrate parses a rate such as "78kbit", "1.6mbit", "12 Mbit/s" or
// "9000000bit" (case-insensitive, decimal prefixes). "0" and "unlimited" give 0
// (no rate limit). Byte-based units ("kbps", "KB/s") are refused because tc(8)
// reads "kbps" as kilobytes per second while web tools read it as kilobits.
func ParseBitrate(s string) (Bitrate, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "0" || t == "unlimited" {
		return 0, nil
	}
	if strings.HasSuffix(t, "bps") || strings.HasSuffix(t, "b/s") && !strings.HasSuffix(t, "bit/s") {
		return 0, fmt.Errorf("%q is ambiguous: write the rate in bits, e.g. \"78kbit\"", s)
	}
	for _, u := range bitrateUnits {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("%q is not a rate: want a number and a unit, e.g. \"78kbit\"", s)
		}
		if v < 0 {
			return 0, fmt.Errorf("%q is negative", s)
		}
		bps := v * u.mult
		if bps > 1e12 {
			return 0, fmt.Errorf("%q is above 1 Tbit/s", s)
		}
		if bps > 0 && bps < 1 {
			return 0, fmt.Errorf("%q is below 1 bit/s", s)
		}
		return Bitrate(math.Round(bps)), nil
	}
	return 0, fmt.Errorf("%q has no unit: want bit, kbit, mbit or gbit (optionally /s)", s)
}

// String formats r in the largest decimal unit that keeps it exact, e.g. "78kbit".
func (r Bitrate) String() string {
	switch {
	case r == 0:
		return "unlimited"
	case r%GbitPerSecond == 0:
		return fmt.Sprintf("%dgbit", r/GbitPerSecond)
	case r%MbitPerSecond == 0:
		return fmt.Sprintf("%dmbit", r/MbitPerSecond)
	case r%KbitPerSecond == 0:
		return fmt.Sprintf("%dkbit", r/KbitPerSecond)
	}
	return fmt.Sprintf("%dbit", uint64(r))
}

// TxTime is the serialization time of n bytes at rate r: n*8/r, rounded up to
// the nanosecond. It is 0 when r is 0 (unlimited).
func (r Bitrate) TxTime(n int) time.Duration {
	if r == 0 || n <= 0 {
		return 0
	}
	bits := uint64(n) * 8 * uint64(time.Second)
	return time.Duration((bits + uint64(r) - 1) / uint64(r))
}

// Probability is a probability in [0, 1]; profiles write it as a percentage ("2%").
type Probability float64

// ParseProbability parses a percentage such as "2%" or "0.5 %" into [0, 1].
// A bare number is refused: "0.02" and "2" are both plausible readings.
func ParseProbability(s string) (Probability, error) {
	t := strings.TrimSpace(s)
	num, ok := strings.CutSuffix(t, "%")
	if !ok {
		return 0, fmt.Errorf("%q is not a percentage: write it with a %% sign, e.g. \"2%%\"", s)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(v) {
		return 0, fmt.Errorf("%q is not a percentage", s)
	}
	if v < 0 || v > 100 {
		return 0, fmt.Errorf("%q is outside 0%%..100%%", s)
	}
	return Probability(v / 100), nil
}

// String formats p as a percentage, e.g. "2%".
func (p Probability) String() string {
	return strconv.FormatFloat(float64(p)*100, 'f', -1, 64) + "%"
}

// ParseByteSize parses a size such as "30000", "64KiB", "1.5KB" or "2MB"
// (KB and MB are decimal, KiB and MiB binary) into bytes.
func ParseByteSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"KiB", 1024}, {"MiB", 1 << 20}, {"KB", 1000}, {"MB", 1e6}, {"B", 1}} {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a size: want bytes, e.g. \"30000\" or \"64KiB\"", s)
	}
	n := v * mult
	if n < 0 || n > 1<<30 {
		return 0, fmt.Errorf("%q is outside 0..1GiB", s)
	}
	return int(math.Round(n)), nil
}
