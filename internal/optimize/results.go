package optimize

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/davidbyttow/govips/v2/vips"
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
// With a folder (Options.ResultsDir), every kept entry is also written
// there, one file per key, and a key missing from memory is looked for
// there: a restarted pepd, or another one sharing the folder, does not
// repeat a transform (an AVIF search costs about 0.75 s of CPU per image
// on the testbed's 2 cores). The files live in a subfolder named after
// the settings that decide a transform's output (resultsFingerprint), so
// results made under other settings are never served. The folder is not
// bounded and reset leaves it: removing it forgets them.
type results struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	ll    *list.List               // of *resultEntry, most recent first
	m     map[string]*list.Element // key: transform + body SHA-256
	dir   string                   // "" or the folder of the kept files
	log   *slog.Logger             // a file that cannot be written or read
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
	return &results{max: max, ll: list.New(), m: map[string]*list.Element{}, log: slog.New(slog.DiscardHandler)}
}

// withDir adds the folder tier under dir (resultsFingerprint(o) names
// its subfolder, created here); errors are the folder's.
func (c *results) withDir(dir string, o Options, log *slog.Logger) (*results, error) {
	c.dir, c.log = filepath.Join(dir, resultsFingerprint(o)), log
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("optimize: results_dir: %w", err)
	}
	return c, nil
}

// resultsFormat is the kept files' format and the transforms' code
// generation: raise it when a change to the transforms changes their
// output for the same settings, so that older files are not served.
const resultsFormat = 1

// resultsFingerprint is 16 hex digits of the SHA-256 of what decides a
// transform's output besides the body: the image options, Brotli's
// quality, the body bound, libvips' version and resultsFormat.
func resultsFingerprint(o Options) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d|%+v|%d|%d|%s", resultsFormat, o.Image, o.BrotliQuality, o.MaxBodyBytes, vips.Version))
	return hex.EncodeToString(sum[:8])
}

// keptFile is one kept entry in the folder (encoding/gob).
type keptFile struct {
	Out         []byte
	ContentType string
	Skip        string
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
	if c.dir == "" {
		return transformResult{}, false
	}
	b, err := os.ReadFile(c.file(key))
	if err != nil {
		if !os.IsNotExist(err) {
			c.log.Warn("optimize: a kept result cannot be read", "err", err)
		}
		return transformResult{}, false
	}
	var f keptFile
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&f); err != nil {
		c.log.Warn("optimize: a kept result cannot be decoded", "file", c.file(key), "err", err)
		return transformResult{}, false
	}
	r := transformResult{out: f.Out, ctype: f.ContentType, skip: f.Skip}
	c.keep(key, r)
	return r, true
}

// file is key's file in the folder: the key in hex.
func (c *results) file(key string) string {
	return filepath.Join(c.dir, hex.EncodeToString([]byte(key)))
}

func (c *results) put(key string, r transformResult) {
	if r.skip == SkipOverload {
		return
	}
	c.keep(key, r)
	if c.dir == "" {
		return
	}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(keptFile{Out: r.out, ContentType: r.ctype, Skip: r.skip}); err != nil {
		c.log.Warn("optimize: a result cannot be encoded", "err", err)
		return
	}
	// Written whole, then renamed: a reader never sees half a file.
	tmp, err := os.CreateTemp(c.dir, ".tmp-*")
	if err == nil {
		_, err = tmp.Write(b.Bytes())
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), c.file(key))
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		c.log.Warn("optimize: a result cannot be kept in results_dir", "err", err)
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
