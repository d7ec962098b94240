package report

import "strings"

// VariantMark starts a mode's variant tag: "url-https-k1+opt@avif+warm" is
// url-https-k1+opt+warm measured with the pepd settings of the campaign's
// variant "avif" over its -pepd ones (testbed run -variant
// avif:optimize.avif=true). The tag is a name of letters, digits, '-' and
// '_', and runs to the next '+' or the end; the mode suffixes the testbed
// adds (+opt, +hints, +warm) may follow it. A variant mode is a peer of the
// same mode without the tag in the same campaign.
const VariantMark = "@"

// SplitVariant returns mode m without its variant tag, and the tag's name
// ("" when m has none): "url+opt@avif+warm" -> ("url+opt+warm", "avif").
func SplitVariant(m string) (plain, name string) {
	head, rest, ok := strings.Cut(m, VariantMark)
	if !ok {
		return m, ""
	}
	name, tail, _ := strings.Cut(rest, "+")
	if tail != "" || strings.HasSuffix(rest, "+") {
		tail = "+" + tail
	}
	return head + tail, name
}
