package run

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Progress shows a campaign's page loads done out of its total. On a
// terminal it is a redrawn bar; on anything else (a redirected `make
// testbed` log, CI) it writes one plain line per 5 % of the loads or per
// minute, whichever comes first, so that a log holds no carriage-return
// frames. A nil *Progress shows nothing; its methods are safe for
// concurrent use.
type Progress struct {
	mu    sync.Mutex
	bar   *progressbar.ProgressBar // terminal
	w     io.Writer                // plain lines
	total int
	done  int
	desc  string
	start time.Time
	last  time.Time // last plain line
	step  int       // loads between plain lines
	// started is set once the first plain line (the first load's
	// description) is written.
	started bool
}

// NewProgress returns a Progress for total loads written to w, or nil when
// w is nil.
func NewProgress(total int, w io.Writer) *Progress {
	if w == nil {
		return nil
	}
	p := &Progress{total: total, start: time.Now(), step: max(1, total/20)}
	p.last = p.start
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("testbed"),
			progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
		return p
	}
	p.w = w
	return p
}

// Describe names what runs now (profile, mode, run, page).
func (p *Progress) Describe(desc string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.desc = desc
	if p.bar != nil {
		p.bar.Describe(desc)
		return
	}
	if !p.started {
		p.started = true
		fmt.Fprintf(p.w, "testbed: %d loads to do; first: %s\n", p.total, desc)
	}
}

// Add counts n loads done.
func (p *Progress) Add(n int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if p.bar != nil {
		p.bar.Add(n) //nolint:errcheck // a progress display
		return
	}
	now := time.Now()
	if p.done%p.step != 0 && p.done != p.total && now.Sub(p.last) < time.Minute {
		return
	}
	p.last = now
	el := now.Sub(p.start).Round(time.Second)
	left := ""
	if p.done > 0 && p.done < p.total {
		left = fmt.Sprintf(", about %v left", (el * time.Duration(p.total-p.done) / time.Duration(p.done)).Round(time.Second))
	}
	fmt.Fprintf(p.w, "testbed: %d/%d loads (%d %%), %v elapsed%s: %s\n", p.done, p.total, 100*p.done/max(1, p.total), el, left, p.desc)
}

// Finish ends the display (the terminal bar is cleared).
func (p *Progress) Finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Finish() //nolint:errcheck // a progress display
	}
}
