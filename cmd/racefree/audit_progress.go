package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// verifyProgress draws one line on a terminal: rows checked, rows/s and the time
// left, at most ten times a second.
type verifyProgress struct {
	mu    sync.Mutex
	w     io.Writer
	total int64
	rows  int64
	start time.Time
	drawn time.Time
	done  bool
}

func newVerifyProgress(w io.Writer) *verifyProgress { return &verifyProgress{w: w, start: time.Now()} }

func (p *verifyProgress) add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rows += n
	if time.Since(p.drawn) >= 100*time.Millisecond {
		p.draw()
	}
}

func (p *verifyProgress) draw() {
	p.drawn = time.Now()
	secs := time.Since(p.start).Seconds()
	rate := float64(p.rows) / max(secs, 1e-9)
	eta := "?"
	if rate > 0 && p.total >= p.rows {
		eta = (time.Duration(float64(p.total-p.rows)/rate) * time.Second).Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "\r%d/%d rows, %.0f rows/s, ETA %s   ", p.rows, p.total, rate, eta)
}

// finish draws the last line and ends it; nil-safe and idempotent.
func (p *verifyProgress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	p.draw()
	fmt.Fprintln(p.w)
}
