package rewrite

// appendCSS appends css to dst with the URLs of url() tokens and of
// "@import" strings in their VIP form (CSS Syntax Level 3, sections 4.3.6
// "consume a url token" and 4.3.5 "consume a string token"). Comments and
// other strings are copied untouched. It returns the extended dst and true
// when a URL changed, or dst as it came and false when css is to be used as
// it is.
func (u *urlRewriter) appendCSS(dst, css []byte, ctx context) ([]byte, bool) {
	changed := false
	last := 0 // css[:last] is already in dst
	start := len(dst)
	importPending := false
	for i := 0; i < len(css); {
		c := css[i]
		switch {
		case c == '/' && i+1 < len(css) && css[i+1] == '*':
			end := indexFrom(css, i+2, "*/")
			if end < 0 {
				i = len(css)
			} else {
				i = end + 2
			}
			continue
		case c == '"' || c == '\'':
			end := stringEnd(css, i)
			if importPending && end > i && end < len(css) && css[end] == c {
				dst = append(dst, css[last:i+1]...)
				var ok bool
				if dst, ok = u.appendCSSURL(dst, css[i+1:end], ctx, true); ok {
					changed = true
				} else {
					dst = append(dst, css[i+1:end]...)
				}
				last = end
			}
			importPending = false
			i = end + 1
			continue
		case c == '@':
			if hasPrefixFold(css[i+1:], "import") && (i+7 >= len(css) || !isNameByte(css[i+7])) {
				importPending = true
				i += 7
				continue
			}
		case (c == 'u' || c == 'U') && hasPrefixFold(css[i+1:], "rl(") && (i == 0 || !isNameByte(css[i-1])):
			open := i + 4
			j := open
			for j < len(css) && isCSSSpace(css[j]) {
				j++
			}
			if j < len(css) && (css[j] == '"' || css[j] == '\'') {
				// url("...") is a function with a string argument.
				q := css[j]
				end := stringEnd(css, j)
				if end < len(css) && css[end] == q {
					dst = append(dst, css[last:j+1]...)
					var ok bool
					if dst, ok = u.appendCSSURL(dst, css[j+1:end], ctx, importPending); ok {
						changed = true
					} else {
						dst = append(dst, css[j+1:end]...)
					}
					last = end
					i = end + 1
				} else {
					i = end
				}
				importPending = false
				continue
			}
			end := j
			bad := false
			for end < len(css) && css[end] != ')' && !isCSSSpace(css[end]) {
				switch css[end] {
				case '"', '\'', '(', '\\':
					bad = true
				}
				end++
			}
			for end < len(css) && isCSSSpace(css[end]) {
				end++
			}
			if end < len(css) && css[end] != ')' {
				bad = true
				for end < len(css) && css[end] != ')' {
					end++
				}
			}
			if end < len(css) && !bad {
				dst = append(dst, css[last:open]...)
				var ok bool
				if dst, ok = u.appendCSSURL(dst, css[open:end], ctx, importPending); ok {
					changed = true
				} else {
					dst = append(dst, css[open:end]...)
				}
				last = end
			}
			importPending = false
			i = end
			continue
		case isCSSSpace(c):
			i++
			continue
		}
		importPending = false
		i++
	}
	if !changed {
		return dst[:start], false
	}
	return append(dst, css[last:]...), true
}

// stringEnd returns the index of the quote closing the CSS string that opens
// at css[i], or of the newline ending it early, or len(css).
func stringEnd(css []byte, i int) int {
	q := css[i]
	for j := i + 1; j < len(css); j++ {
		switch css[j] {
		case q, '\n', '\r', '\f':
			return j
		case '\\':
			j++
		}
	}
	return len(css)
}

func indexFrom(b []byte, from int, sep string) int {
	for i := from; i+len(sep) <= len(b); i++ {
		if b[i] == sep[0] && string(b[i:i+len(sep)]) == sep {
			return i
		}
	}
	return -1
}

func hasPrefixFold(b []byte, s string) bool {
	return len(b) >= len(s) && asciiEqualFold(b[:len(s)], s)
}

func isCSSSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}

// isNameByte reports whether c continues a CSS identifier (section 4.2
// "name code point", with any non-ASCII byte and '\' for escapes).
func isNameByte(c byte) bool {
	return isAlpha(c) || c >= '0' && c <= '9' || c == '-' || c == '_' || c >= 0x80 || c == '\\'
}

// appendCSSURL is appendURL for a url() token or an @import string;
// imported is true for an @import rule's URL, which goes under the plain
// http://VIP when plainImports is set.
func (u *urlRewriter) appendCSSURL(dst, raw []byte, ctx context, imported bool) ([]byte, bool) {
	if !imported || !u.plainImports || u.plain {
		return u.appendURL(dst, raw, ctx)
	}
	u.plain = true
	defer func() { u.plain = false }()
	return u.appendURL(dst, raw, ctx)
}
