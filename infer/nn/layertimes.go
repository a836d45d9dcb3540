package nn

import (
	"sort"
	"strings"
	"syscall"
	"time"
)

// LayerTime is the time spent in one group of layers, summed over images.
type LayerTime struct {
	Group   string
	Seconds float64
	Calls   int
	// CPUSeconds is the process's CPU time (user + system) while the
	// group ran: on a machine shared with other jobs it counts only this
	// process's work, and CPUSeconds/Seconds is the cores it kept busy.
	CPUSeconds float64
	// GFLOP is the group's convolution work, in the multiply-adds of a
	// direct convolution (2·out·in·kh·kw per output pixel, whichever
	// algorithm ran), so GFLOP/Seconds compares groups and engines; 0 for
	// groups with no convolution (transform, maxpool, postprocess).
	GFLOP float64
}

// Times accumulates time per layer group when a runner is asked to.
type Times struct {
	d, cpu map[string]time.Duration
	n      map[string]int
	flops  map[string]float64
}

func NewTimes() *Times {
	return &Times{d: map[string]time.Duration{}, cpu: map[string]time.Duration{}, n: map[string]int{}, flops: map[string]float64{}}
}

// Stamp is a start time: wall clock and the process's CPU time.
type Stamp struct {
	wall time.Time
	cpu  time.Duration
}

// now is the current stamp (zero when times are off: no system call).
func (l *Times) Now() Stamp {
	if l == nil {
		return Stamp{}
	}
	return Stamp{time.Now(), ProcessCPU()}
}

// ProcessCPU is the process's user + system CPU time.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// addConv is add for a convolution of c with an oh×ow output: it also
// counts the convolution's direct-equivalent FLOPs.
func (l *Times) AddConv(c *Conv, oh, ow int, since Stamp) {
	if l == nil {
		return
	}
	l.Add(GroupOf(c.Name), since)
	l.AddFLOPs(c, oh, ow)
}

// AddFLOPs counts the work of a convolution of c with an oh×ow output in
// its group, without a time (a map that ran with others: ConvLevels).
func (l *Times) AddFLOPs(c *Conv, oh, ow int) {
	if l == nil {
		return
	}
	l.flops[GroupOf(c.Name)] += 2 * float64(c.Out) * float64(c.In*c.KH*c.KW) * float64(oh*ow)
}

func (l *Times) Add(group string, since Stamp) {
	if l == nil {
		return
	}
	l.d[group] += time.Since(since.wall)
	l.cpu[group] += ProcessCPU() - since.cpu
	l.n[group]++
}

// GroupOf names the layer group of a convolution: stem, layer1..layer4,
// fpn, head.cls, head.reg.
func GroupOf(name string) string {
	switch {
	case strings.HasPrefix(name, "backbone.body.conv1"):
		return "stem"
	case strings.HasPrefix(name, "backbone.body.layer"):
		return name[len("backbone.body."):len("backbone.body.layer1")]
	case strings.HasPrefix(name, "backbone.fpn."):
		return "fpn"
	case strings.HasPrefix(name, "head.classification_head."):
		return "head.cls"
	case strings.HasPrefix(name, "head.regression_head."):
		return "head.reg"
	}
	return name
}

// list is the time per group, slowest first (nil when off).
func (l *Times) List() []LayerTime {
	if l == nil {
		return nil
	}
	var out []LayerTime
	for g, d := range l.d {
		out = append(out, LayerTime{Group: g, Seconds: d.Seconds(), Calls: l.n[g], CPUSeconds: l.cpu[g].Seconds(), GFLOP: l.flops[g] / 1e9})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seconds > out[j].Seconds })
	return out
}
