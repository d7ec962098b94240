package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestScale runs this test binary again with PEP_TEST_SLOWNESS set, so
// that the factor is read fresh (it is read once per process).
func TestScale(t *testing.T) {
	if v := os.Getenv("PEP_TESTENV_CHILD"); v != "" {
		if got := Scale(2 * time.Second).String(); got != v {
			t.Fatalf("Scale(2s) = %s, want %s", got, v)
		}
		return
	}
	for _, c := range []struct{ env, want string }{{"", "2s"}, {"1", "2s"}, {"2.5", "5s"}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestScale$", "-test.count=1")
		cmd.Env = append(os.Environ(), Env+"="+c.env, "PEP_TESTENV_CHILD="+c.want)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s=%q: %v\n%s", Env, c.env, err, out)
		}
	}
	for _, v := range []string{"0.5", "fast", "1000"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestScale$", "-test.count=1")
		cmd.Env = append(os.Environ(), Env+"="+v, "PEP_TESTENV_CHILD=any")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "want a decimal factor from 1 to 100") {
			t.Errorf("%s=%q accepted: %v\n%s", Env, v, err, out)
		}
	}
}
