package report

import (
	"bytes"
	"fmt"
	"sort"
)

// Reach is one mode's bytes against direct's, page by page, split by what
// pep can reach (Load.SplicedBytes: https from hosts other than the VIP,
// which pepd splices and never decrypts). Each figure is the median over
// pages of the page's ratio between its median loads over runs (HAR
// transfer sizes, not the link's counters).
type Reach struct {
	Mode  string
	Pages int // pages with HARs of both this mode and direct
	// Bytes is the mode's bytes over direct's. Reached is the same over
	// the bytes pep can reach: (Bytes - SplicedBytes) over direct's
	// (Bytes - SplicedBytes), pages where direct has some.
	Bytes, Reached float64
	// Floor is direct's SplicedBytes over its Bytes: the ratio this mode
	// would reach if it carried none of the bytes it can reach (every
	// spliced byte crossing the radio link as in direct). FloorLow and
	// FloorHigh are its lower and upper quartiles over pages; Above counts
	// the pages whose floor is above Target.
	Floor, FloorLow, FloorHigh float64
	Above                      int
}

// ReachTarget is the radio ratio the reach table counts pages against
// (issue 27: radio bytes per page at most 0.50 of direct's).
const ReachTarget = 0.5

// pageBytes is a page's bytes and spliced bytes in one mode, each the
// median over its loads.
type pageBytes struct{ bytes, spliced float64 }

func medianBytes(ls []Load) pageBytes {
	var b, s []float64
	for _, l := range ls {
		b = append(b, float64(l.Bytes))
		s = append(s, float64(l.SplicedBytes))
	}
	return pageBytes{NewSpread(b).Median, NewSpread(s).Median}
}

// Reaches returns a Reach per mode of v but direct, from tv's loads; nil
// without direct's.
func Reaches(v View, tv TimeView) []Reach {
	by := map[[2]string][]Load{}
	for _, l := range tv.Loads {
		by[[2]string{l.Page, l.Mode}] = append(by[[2]string{l.Page, l.Mode}], l)
	}
	var out []Reach
	for _, m := range v.Modes {
		if m == "direct" {
			continue
		}
		r := Reach{Mode: m}
		var ratio, reached, floor []float64
		for _, pg := range v.Pages {
			dl, ml := by[[2]string{pg, "direct"}], by[[2]string{pg, m}]
			if len(dl) == 0 || len(ml) == 0 {
				continue
			}
			d, a := medianBytes(dl), medianBytes(ml)
			if d.bytes <= 0 {
				continue
			}
			r.Pages++
			ratio = append(ratio, a.bytes/d.bytes)
			f := d.spliced / d.bytes
			floor = append(floor, f)
			if f > ReachTarget {
				r.Above++
			}
			if d.bytes > d.spliced {
				reached = append(reached, (a.bytes-a.spliced)/(d.bytes-d.spliced))
			}
		}
		if r.Pages == 0 {
			continue
		}
		r.Bytes, r.Reached = NewSpread(ratio).Median, NewSpread(reached).Median
		r.Floor, r.FloorLow, r.FloorHigh = NewSpread(floor).Median, quantile(floor, 0.25), quantile(floor, 0.75)
		out = append(out, r)
	}
	return out
}

// quantile is the q-quantile of vs (0 <= q <= 1), linear between the
// nearest ranks; 0 for none.
func quantile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	x := q * float64(len(s)-1)
	i := int(x)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (x-float64(i))*(s[i+1]-s[i])
}

// writeReach prints the Reach table: how far a mode's bytes are from
// direct's on the part pep can reach, and the floor set by the part it
// cannot.
func writeReach(b *bytes.Buffer, v View, tv TimeView) {
	rs := Reaches(v, tv)
	if len(rs) == 0 {
		return
	}
	b.WriteString("### What pep can reach (bytes, a HAR per load)\n\n")
	fmt.Fprintf(b, "Bytes over https from hosts other than the VIP are spliced: pepd never decrypts them, so no mode changes them. "+
		"Page by page (each page's median load over runs, HAR transfer sizes), the median over pages of: the mode's bytes over direct's; "+
		"the same over the bytes pep can reach (all but the spliced ones); and the floor, direct's spliced bytes over its bytes, "+
		"the ratio a mode would reach if it carried none of the reachable bytes, with its quartiles and the pages whose floor is above %.2f.\n\n", ReachTarget)
	fmt.Fprintf(b, "| mode | pages | bytes against direct | reachable bytes against direct's | floor (quartiles) | pages with a floor above %.2f |\n", ReachTarget)
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(b, "| %s | %d | %.3f | %.3f | %.3f (%.3f-%.3f) | %d |\n", r.Mode, r.Pages, r.Bytes, r.Reached, r.Floor, r.FloorLow, r.FloorHigh, r.Above)
	}
	b.WriteString("\n")
}
