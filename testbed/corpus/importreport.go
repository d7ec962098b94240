package corpus

import (
	"fmt"
)

// ImportReport returns, one line each, what a user needs to trust the
// corpus before measuring with it: pages, objects, hosts and bytes; for
// WARC input the records read, the response records used and the share,
// the records skipped by reason, the payloads repaired by kind, the
// framing errors, and the request targets recorded without a response;
// then one line per page with its objects split by recorded scheme (http
// objects are rewritable by URL mode, https ones only spliced by SNI).
// `testbed import` prints it, and every run puts it at the top of its log
// and its report.
func (c *Corpus) ImportReport() []string {
	var bytes int64
	objects := 0
	for _, p := range c.Pages {
		bytes += p.Bytes()
		objects += len(p.Objects)
	}
	s := c.Stats
	lines := []string{fmt.Sprintf("source %s: %d pages, %d objects (%d distinct), %d hosts, %s",
		c.Source, len(c.Pages), objects, c.Len(), len(c.hosts), byteString(bytes))}
	if s.Records > 0 {
		share := 0.0
		if s.Responses > 0 {
			share = 100 * float64(s.ResponsesUsed) / float64(s.Responses)
		}
		lines = append(lines,
			fmt.Sprintf("WARC records read %d; response and revisit records %d, used %d (%.1f %%)", s.Records, s.Responses, s.ResponsesUsed, share),
			"records skipped by reason: "+countList(s.SkippedBy),
			"payloads repaired: "+countList(s.Repaired),
			fmt.Sprintf("objects without a response (request records never answered): %d", s.Unanswered))
		for _, e := range s.Errors {
			lines = append(lines, "framing error, rest of file skipped: "+e)
		}
	} else if s.Skipped > 0 || s.Rewritten > 0 {
		lines = append(lines, fmt.Sprintf("files %d, skipped %d, cross-host references made absolute %d", s.Files, s.Skipped, s.Rewritten))
	}
	if s.Conflicts > 0 {
		lines = append(lines, fmt.Sprintf("objects stored by several pages with different bodies (first page's kept): %d", s.Conflicts))
	}
	for _, p := range c.Pages {
		h, hs := p.Schemes()
		lines = append(lines, fmt.Sprintf("page %s: %d objects (http %d, https %d), %d hosts, %s, %s",
			p.Name, len(p.Objects), h, hs, len(p.Hosts()), byteString(p.Bytes()), p.URL))
	}
	return lines
}

// byteString prints n bytes in kB or MB (decimal), or bytes below 10 kB.
func byteString(n int64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d bytes", n)
}
