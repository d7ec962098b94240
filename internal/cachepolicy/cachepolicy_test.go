package cachepolicy

import "testing"

func TestPrivateUA(t *testing.T) {
	for _, tc := range []struct {
		name, in, out string
		private, keep bool
	}{
		{"plain", "Mozilla/5.0 (X11) Chrome/156", "Mozilla/5.0 (X11) Chrome/156", false, false},
		{"appended", "MyApp/2.1 CK-Private", "MyApp/2.1", true, false},
		{"with a version", "MyApp/2.1 CK-Private/1 Foo", "MyApp/2.1 Foo", true, false},
		{"alone", "CK-Private", "", true, false},
		{"inside another word is not the token", "MyApp CK-PrivateX", "MyApp CK-PrivateX", false, false},
		{"kept when configured", "MyApp/2.1 CK-Private", "MyApp/2.1 CK-Private", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, private := PrivateUA(tc.in, tc.keep)
			if out != tc.out || private != tc.private {
				t.Errorf("PrivateUA(%q) = %q, %v; want %q, %v", tc.in, out, private, tc.out, tc.private)
			}
		})
	}
}
