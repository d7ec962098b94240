package netem

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func TestPlanTCGolden(t *testing.T) {
	for _, tc := range []struct {
		name, profile string
		spec          LinkSpec
	}{
		{"paper-average", "paper-average", LinkSpec{Namespace: "radio", IfA: "ra", IfB: "rb"}},
		{"lte-ns-path", "lte", LinkSpec{Namespace: "/proc/1234/ns/net", IfA: "eth0", IfB: "eth1"}},
		{"lte-current-ns", "lte", LinkSpec{IfA: "eth0", IfB: "eth1"}},
		{"h2a-rtt100-loss2", "h2a-rtt100-loss2", LinkSpec{Namespace: "radio", IfA: "ra", IfB: "rb"}},
		{"identity", "h2a-rtt0-loss0", LinkSpec{Namespace: "radio", IfA: "ra", IfB: "rb"}},
		{"bursty", "testdata/bursty.yaml", LinkSpec{Namespace: "radio", IfA: "ra", IfB: "rb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := LoadProfile(tc.profile)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			b.WriteString("# apply\n")
			for _, c := range PlanTC(tc.spec, p) {
				b.WriteString(c.String() + "\n")
			}
			b.WriteString("# teardown\n")
			for _, c := range PlanTCTeardown(tc.spec, p) {
				b.WriteString(c.String() + "\n")
			}
			golden := filepath.Join("testdata", "tc", tc.name+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if b.String() != string(want) {
				t.Fatalf("plan differs from %s:\n got:\n%s\nwant:\n%s", golden, b.String(), want)
			}
		})
	}
}

func TestApplyPlanStopsAtFirstError(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	cmds := []Command{
		{Args: []string{"true"}},
		{Args: []string{"sh", "-c", "echo boom >&2; exit 3"}},
		{Args: []string{"touch", marker}},
	}
	err := ApplyPlan(t.Context(), testLogger(t), cmds)
	want := `netem: step 2 "sh -c echo boom >&2; exit 3": exit status 3: boom`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("step 3 ran after step 2 failed")
	}
}

// TestPlanTCParses hands every planned tc command to tc(8) with a device
// that does not exist: tc parses the netem options before it looks the
// device up, so a plan tc accepts fails with "Cannot find device" and a
// plan it cannot parse fails with "What is ...". No kernel netem needed.
func TestPlanTCParses(t *testing.T) {
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("tc(8) not installed (Debian package iproute2)")
	}
	for _, name := range []string{"paper-average", "lte", "h2a-rtt100-loss2", "testdata/bursty.yaml"} {
		p, err := LoadProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range PlanTC(LinkSpec{IfA: "ra", IfB: "rb"}, p) {
			if c.Args[0] != "tc" {
				continue
			}
			args := slices.Clone(c.Args[1:])
			args[slices.Index(args, "dev")+1] = "pepnx" + strconv.Itoa(os.Getpid())
			out, _ := exec.Command("tc", args...).CombinedOutput()
			if !strings.Contains(string(out), "Cannot find device") {
				t.Errorf("%s: tc %s:\n%s", name, strings.Join(args, " "), out)
			}
		}
	}
}
