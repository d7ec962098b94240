package optimize

import (
	"container/list"
	"sync"
)

// results keeps finished transforms for the next miss of their object: a
// response whose transform did not finish within Options.Deadline is
// served untransformed and not stored by Squid (DeferredHeader), and the
// transform's result waits here, keyed by transform and the SHA-256 of
// the origin's body, so that the next miss (same bytes from the origin)
// gets the variant at once and Squid stores it. Least recently used
// entries go first once the results' bytes pass max. Skips (an image
// WebP cannot shrink, an undecodable body) are kept too, at a nominal
// cost, so that they are not tried again; overload is not (it is not a
// property of the body). Safe for concurrent use.
//
// With a folder (Options.ResultsDir, keptDir), every kept entry is also
// written there and a key missing from memory is looked for there; reset
// leaves the folder.
type results struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	ll    *list.List               // of *resultEntry, most recent first
	m     map[string]*list.Element // key: transform + body SHA-256
	disk  *keptDir                 // nil: memory only
}

type resultEntry struct {
	key string
	r   transformResult
}

// entryOverhead is what one entry is counted for besides its output: key,
// map and list bookkeeping.
const entryOverhead = 200

// cost is the bytes r is counted for.
func cost(r transformResult) int64 { return int64(len(r.out)) + entryOverhead }

func newResults(max int64) *results {
	return &results{max: max, ll: list.New(), m: map[string]*list.Element{}}
}

func (c *results) get(key string) (transformResult, bool) {
	c.mu.Lock()
	e, ok := c.m[key]
	if ok {
		c.ll.MoveToFront(e)
		r := e.Value.(*resultEntry).r
		c.mu.Unlock()
		return r, true
	}
	c.mu.Unlock()
	if c.disk == nil {
		return transformResult{}, false
	}
	r, ok := c.disk.load(key)
	if ok {
		c.keep(key, r)
	}
	return r, ok
}

func (c *results) put(key string, r transformResult) {
	if r.skip == SkipOverload {
		return
	}
	c.keep(key, r)
	if c.disk != nil {
		c.disk.store(key, r)
	}
}

// keep puts r in memory under key, within the byte bound.
func (c *results) keep(key string, r transformResult) {
	size := cost(r)
	if size > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok {
		c.bytes -= cost(e.Value.(*resultEntry).r)
		c.ll.Remove(e)
	}
	c.m[key] = c.ll.PushFront(&resultEntry{key: key, r: r})
	c.bytes += size
	for c.bytes > c.max {
		old := c.ll.Back()
		oe := old.Value.(*resultEntry)
		c.ll.Remove(old)
		delete(c.m, oe.key)
		c.bytes -= cost(oe.r)
	}
}

// reset drops every entry in memory; the folder's files stay.
func (c *results) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ll.Init()
	clear(c.m)
	c.bytes = 0
}

// size returns the entries and the bytes they are counted for.
func (c *results) size() (n int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len(), c.bytes
}
