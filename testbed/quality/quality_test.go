package quality

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestQualityReport runs the report over the optimizer's real test images
// at two qualities: SSIM rises with the quality, values are in (0, 1],
// the animated GIF and the corrupt files are counted as skipped.
func TestQualityReport(t *testing.T) {
	if err := exec.Command(Python(), "-c", "import skimage.metrics, PIL").Run(); err != nil {
		t.Skip("needs python3-skimage and python3-pil (make deps)")
	}
	work := t.TempDir()
	rep, err := Run(context.Background(), Options{Files: []string{filepath.Join("..", "..", "internal", "optimize", "testdata")},
		Qualities: []int{30, 90}, Work: work})
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := rep.Qualities[0], rep.Qualities[1]
	if lo.Transformed == 0 || hi.Transformed == 0 {
		t.Fatalf("nothing transformed: %+v %+v", lo, hi)
	}
	if !(lo.Median > 0 && lo.Median < hi.Median && hi.Median <= 1) {
		t.Errorf("SSIM median q30 %.4f, q90 %.4f: want 0 < q30 < q90 <= 1", lo.Median, hi.Median)
	}
	if lo.BytesOut >= hi.BytesOut {
		t.Errorf("q30 %d bytes, q90 %d: want fewer at the lower quality", lo.BytesOut, hi.BytesOut)
	}
	for _, reason := range []string{"animated", "undecodable", "over pixel limit"} {
		if lo.Skipped[reason] == 0 {
			t.Errorf("skipped %v: want %q counted", lo.Skipped, reason)
		}
	}
	if _, err := os.Stat(filepath.Join(work, "results.json")); err != nil {
		t.Error(err)
	}
	t.Log("\n" + rep.Markdown())
}
