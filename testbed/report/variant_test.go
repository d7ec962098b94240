package report

import "testing"

// TestSplitVariant: the tag runs from VariantMark to the next '+' or the
// end, and the suffixes around it stay in order.
func TestSplitVariant(t *testing.T) {
	for _, tc := range []struct{ m, plain, name string }{
		{"url", "url", ""},
		{"url+opt+warm", "url+opt+warm", ""},
		{"url+opt@avif", "url+opt", "avif"},
		{"url-https-k1+opt@avif+warm", "url-https-k1+opt+warm", "avif"},
		{"url@q_1-b+opt+hints+warm", "url+opt+hints+warm", "q_1-b"},
		{"url@+opt", "url+opt", ""},
		{"url@", "url", ""},
	} {
		plain, name := SplitVariant(tc.m)
		if plain != tc.plain || name != tc.name {
			t.Errorf("SplitVariant(%q) = %q, %q; want %q, %q", tc.m, plain, name, tc.plain, tc.name)
		}
	}
}
