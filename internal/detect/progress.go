package detect

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Progress reports rank 0's own shard: on a terminal one line redrawn in
// place with an ETA, otherwise (logs, Slurm output files) a plain line at
// most every interval, and always a last line.
type Progress struct {
	w           io.Writer
	tty         bool
	total, done int
	start, last time.Time
	interval    time.Duration
	Unit        string // what is counted: "images" (the default) or "windows"
}

func NewProgress(w io.Writer, total int) *Progress {
	if w == nil || total == 0 {
		return nil
	}
	p := &Progress{w: w, total: total, start: time.Now(), interval: 10 * time.Second, Unit: "images"}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	p.last = p.start
	return p
}

func (p *Progress) Add(n int) {
	if p == nil {
		return
	}
	p.done += n
	now := time.Now()
	if p.done < p.total && !p.tty && now.Sub(p.last) < p.interval {
		return
	}
	p.last = now
	el := now.Sub(p.start)
	line := fmt.Sprintf("canopy: rank 0: %d/%d %s, %.1f s", p.done, p.total, p.Unit, el.Seconds())
	if p.done > 0 && p.done < p.total {
		eta := time.Duration(float64(el) / float64(p.done) * float64(p.total-p.done))
		line += fmt.Sprintf(", %.2f s/%s, ETA %s", el.Seconds()/float64(p.done), strings.TrimSuffix(p.Unit, "s"), eta.Round(time.Second))
	}
	if p.tty {
		end := ""
		if p.done >= p.total {
			end = "\n"
		}
		fmt.Fprintf(p.w, "\r\033[K%s%s", line, end)
		return
	}
	fmt.Fprintln(p.w, line)
}
