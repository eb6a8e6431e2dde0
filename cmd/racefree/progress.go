package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/racefree/racefree/uniquecheck"
)

// scanProgress draws unique-check's progress line on stderr: the check
// running, the rows checked of the total, their rate and the time left.
// A check is one statement, so rows count as checked when their check
// ends; the rate is that of the checks done, and the time left is the
// rows left at that rate, less the time the running check has had. It
// redraws at most once a second, and a nil *scanProgress draws nothing.
type scanProgress struct {
	mu      sync.Mutex
	w       io.Writer
	checks  int
	rows    []int64 // per check: the table's rows (an estimate unless exact)
	exact   bool
	cur     int
	label   string
	done    int64 // rows of the checks done
	start   time.Time
	began   time.Time // of the running check
	drawn   time.Time
	now     func() time.Time
	tick    *time.Ticker
	stopped chan struct{}
	quit    chan struct{}
	once    sync.Once
}

// progressEvery is how often the line is redrawn at most.
const progressEvery = time.Second

func newScanProgress(w io.Writer, checks int) *scanProgress {
	p := &scanProgress{w: w, checks: checks, exact: true, now: time.Now, stopped: make(chan struct{}), quit: make(chan struct{})}
	p.start = p.now()
	p.tick = time.NewTicker(progressEvery)
	go func() {
		defer close(p.stopped)
		for {
			select {
			case <-p.quit:
				return
			case <-p.tick.C:
				p.mu.Lock()
				p.draw(false)
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// begin marks check i, of spec s, as running.
func (p *scanProgress) begin(i int, s uniquecheck.Spec) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur, p.began = i, p.now()
	p.label = s.Table + " (" + strings.Join(s.Keys, ", ") + ")"
	p.draw(i == 0)
}

// end marks check i as done.
func (p *scanProgress) end(i int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < len(p.rows) {
		p.done += p.rows[i]
	}
	p.cur = i + 1
	p.draw(false)
}

func (p *scanProgress) total() int64 {
	var n int64
	for _, r := range p.rows {
		n += r
	}
	return n
}

// line returns the progress line at now.
func (p *scanProgress) line(now time.Time) string {
	elapsed := now.Sub(p.start)
	about := "~"
	if p.exact {
		about = ""
	}
	var b strings.Builder
	if p.cur < p.checks {
		fmt.Fprintf(&b, "racefree: check %d/%d %s: ", p.cur+1, p.checks, p.label)
	} else {
		fmt.Fprintf(&b, "racefree: %d checks done: ", p.checks)
	}
	total := p.total()
	fmt.Fprintf(&b, "%d of %s%d rows", p.done, about, total)
	rate := "? rows/s"
	eta := "?"
	if secs := elapsed.Seconds(); p.done > 0 && secs > 0 {
		r := float64(p.done) / secs
		rate = fmt.Sprintf("%.0f rows/s", r)
		left := time.Duration(float64(max(0, total-p.done))/r*float64(time.Second)) - now.Sub(p.began)
		if p.cur >= p.checks {
			left = 0
		}
		eta = max(0, left).Round(time.Second).String()
	}
	fmt.Fprintf(&b, ", %s, elapsed %s, ETA %s", rate, elapsed.Round(time.Second), eta)
	return b.String()
}

// draw redraws the line, unless it was drawn less than progressEvery ago
// and force is false.
func (p *scanProgress) draw(force bool) {
	now := p.now()
	if !force && now.Sub(p.drawn) < progressEvery {
		return
	}
	p.drawn = now
	fmt.Fprintf(p.w, "\r\033[K%s", p.line(now))
}

// stop draws the last line, ends it and stops redrawing; nil-safe and
// idempotent.
func (p *scanProgress) stop() {
	if p == nil {
		return
	}
	p.once.Do(func() {
		p.tick.Stop()
		close(p.quit)
		<-p.stopped
		p.mu.Lock()
		defer p.mu.Unlock()
		p.draw(true)
		fmt.Fprintln(p.w)
	})
}
