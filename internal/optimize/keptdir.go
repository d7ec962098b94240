package optimize

import (
	"bytes"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/davidbyttow/govips/v2/vips"
)

// keptDir is the results' folder tier (Options.ResultsDir): one file per
// kept entry, so that a restarted pepd, or another one sharing the
// folder, does not repeat a transform (an AVIF search costs about 0.75 s
// of CPU per image on the testbed's 2 cores). The files live in a
// subfolder named after the settings that decide a transform's output
// (resultsFingerprint): results made under other settings are never
// served. The whole folder, every subfolder included, is bounded by max
// bytes: past it the files least recently stored or read (by mtime) go
// until it is at nine tenths of max. A file that cannot be read or
// decoded is a miss, logged. Safe for concurrent use, also by several
// processes (a file is written whole, then renamed).
type keptDir struct {
	root, dir string // Options.ResultsDir; its subfolder for these settings
	max       int64
	log       *slog.Logger

	mu       sync.Mutex
	bytes    int64 // the files' sizes, as of the last walk and this process's writes since
	evicting bool
}

// keptFile is one kept entry's file (encoding/gob).
type keptFile struct {
	Out         []byte
	ContentType string
	Skip        string
}

// tmpPrefix starts the name of a file being written.
const tmpPrefix = ".tmp-"

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

// openKeptDir creates root's subfolder for o's settings and sums the
// files already under root; max bounds them (bytes, > 0). Errors are the
// folder's, prefixed "optimize: results_dir".
func openKeptDir(root string, o Options, max int64, log *slog.Logger) (*keptDir, error) {
	d := &keptDir{root: root, dir: filepath.Join(root, resultsFingerprint(o)), max: max, log: log}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return nil, fmt.Errorf("optimize: results_dir: %w", err)
	}
	files, err := d.files()
	if err != nil {
		return nil, fmt.Errorf("optimize: results_dir: %w", err)
	}
	for _, f := range files {
		d.bytes += f.size
	}
	return d, nil
}

// file is key's file: the key in hex.
func (d *keptDir) file(key string) string {
	return filepath.Join(d.dir, hex.EncodeToString([]byte(key)))
}

// load returns key's kept result; a file read marks it recently used.
func (d *keptDir) load(key string) (transformResult, bool) {
	name := d.file(key)
	b, err := os.ReadFile(name)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			d.log.Warn("optimize: a kept result cannot be read", "err", err)
		}
		return transformResult{}, false
	}
	var f keptFile
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&f); err != nil {
		d.log.Warn("optimize: a kept result cannot be decoded", "file", name, "err", err)
		return transformResult{}, false
	}
	now := time.Now()
	os.Chtimes(name, now, now) // recency for eviction; a failure only ages the file
	return transformResult{out: f.Out, ctype: f.ContentType, skip: f.Skip}, true
}

// store writes r as key's file (whole, then renamed), then evicts if the
// folder passed max.
func (d *keptDir) store(key string, r transformResult) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(keptFile{Out: r.out, ContentType: r.ctype, Skip: r.skip}); err != nil {
		d.log.Warn("optimize: a result cannot be encoded", "err", err)
		return
	}
	name := d.file(key)
	var old int64
	if fi, err := os.Stat(name); err == nil {
		old = fi.Size()
	}
	tmp, err := os.CreateTemp(d.dir, tmpPrefix+"*")
	if err == nil {
		_, err = tmp.Write(b.Bytes())
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), name)
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		d.log.Warn("optimize: a result cannot be kept in results_dir", "err", err)
		return
	}
	d.mu.Lock()
	d.bytes += int64(b.Len()) - old
	evict := d.bytes > d.max && !d.evicting
	d.evicting = d.evicting || evict
	d.mu.Unlock()
	if evict {
		d.evict()
	}
}

// keptInfo is one file under root.
type keptInfo struct {
	path  string
	size  int64
	mtime time.Time
}

// files lists the regular files under root, but those being written.
func (d *keptDir) files() ([]keptInfo, error) {
	var out []keptInfo
	err := filepath.WalkDir(d.root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed by another process meanwhile
			}
			return err
		}
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), tmpPrefix) {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		out = append(out, keptInfo{path, fi.Size(), fi.ModTime()})
		return nil
	})
	return out, err
}

// evict removes the oldest files under root until they take at most
// nine tenths of max; the sum is taken anew from the walk (another
// process may share the folder).
func (d *keptDir) evict() {
	files, err := d.files()
	var total int64
	for _, f := range files {
		total += f.size
	}
	if err == nil {
		slices.SortFunc(files, func(a, b keptInfo) int { return a.mtime.Compare(b.mtime) })
		removed := 0
		for _, f := range files {
			if total <= d.max/10*9 {
				break
			}
			if err = os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				break
			}
			err = nil
			total -= f.size
			removed++
		}
		d.log.Info("optimize: results_dir past its bound: the oldest files removed", "removed", removed, "bytes", total, "max", d.max)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.evicting = false
	if err != nil {
		d.log.Warn("optimize: results_dir cannot be bounded", "err", err)
		return // the count stays this process's: the walk's may be partial
	}
	d.bytes = total
}

// size returns the files' bytes as this process counts them.
func (d *keptDir) size() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bytes
}
