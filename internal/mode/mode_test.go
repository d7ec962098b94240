package mode

import (
	"sync"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{"off", Off, false},
		{"dns", DNS, false},
		{"URL", URL, false},
		{" url ", URL, false},
		{"", Off, true},
		{"proxy", Off, true},
	}
	for _, c := range cases {
		got, err := Parse(c.in)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("Parse(%q) = %v, %v; want %v, err=%v", c.in, got, err, c.want, c.wantErr)
		}
	}
}

func TestStringRoundTrip(t *testing.T) {
	for _, m := range All {
		b, _ := m.MarshalText()
		var back Mode
		if err := back.UnmarshalText(b); err != nil || back != m {
			t.Errorf("round trip of %v gave %v, %v", m, back, err)
		}
	}
}

func TestSwitchConcurrent(t *testing.T) {
	s := NewSwitch(Off)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				s.Set(All[(i+j)%3])
				if m := s.Get(); m < Off || m > URL {
					t.Errorf("Get returned %v", m)
				}
			}
		}(i)
	}
	wg.Wait()
	if s.Set(URL); s.Set(URL) != URL {
		t.Fatal("Set did not return the previous mode")
	}
	if s.Changes() == 0 {
		t.Fatal("Changes not counted")
	}
}
