package optimize

import (
	"bytes"
	"fmt"
	"testing"
)

// TestResults: the finished-transform store keeps at most its byte bound,
// drops the least recently used first, keeps skips but not overload, and
// replaces an entry put twice.
func TestResults(t *testing.T) {
	c := newResults(3 * (1000 + entryOverhead))
	out := func(i int) transformResult {
		return transformResult{out: bytes.Repeat([]byte{byte(i)}, 1000), ctype: TypeWebP}
	}
	for i := range 3 {
		c.put(fmt.Sprint(i), out(i))
	}
	if _, ok := c.get("0"); !ok { // 0 is now the most recently used
		t.Fatal("0 missing before the bound was reached")
	}
	c.put("3", out(3))
	if _, ok := c.get("1"); ok {
		t.Error("1, the least recently used, was kept past the bound")
	}
	for _, k := range []string{"0", "2", "3"} {
		if r, ok := c.get(k); !ok || len(r.out) != 1000 || int(r.out[0]) != int(k[0]-'0') {
			t.Errorf("%s: %v %v", k, ok, len(r.out))
		}
	}
	if n, b := c.size(); n != 3 || b != 3*(1000+entryOverhead) {
		t.Errorf("size %d entries, %d bytes", n, b)
	}
	c.put("3", out(3))
	if n, b := c.size(); n != 3 || b != 3*(1000+entryOverhead) {
		t.Errorf("after a second put: %d entries, %d bytes", n, b)
	}
	c.put("skip", transformResult{skip: SkipNotSmaller})
	if r, ok := c.get("skip"); !ok || r.skip != SkipNotSmaller {
		t.Error("a skip was not kept")
	}
	c.put("busy", transformResult{skip: SkipOverload})
	if _, ok := c.get("busy"); ok {
		t.Error("overload was kept: it says nothing about the body")
	}
	c.put("huge", transformResult{out: make([]byte, 4000)})
	if _, ok := c.get("huge"); ok {
		t.Error("a result larger than the whole bound was kept")
	}
}
