package retinanet

import (
	"sort"
	"strings"
	"time"
)

// LayerTime is the time spent in one group of layers, summed over images.
type LayerTime struct {
	Group   string
	Seconds float64
	Calls   int
}

// layerTimes accumulates time per group when a Runner is asked to.
type layerTimes struct {
	d map[string]time.Duration
	n map[string]int
}

func (l *layerTimes) add(group string, since time.Time) {
	if l == nil {
		return
	}
	l.d[group] += time.Since(since)
	l.n[group]++
}

// groupOf names the layer group of a convolution: stem, layer1..layer4,
// fpn, head.cls, head.reg.
func groupOf(name string) string {
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

// EnableLayerTimes makes the Runner time every layer group (a little
// overhead per layer; off by default).
func (r *Runner) EnableLayerTimes() {
	r.e.times = &layerTimes{d: map[string]time.Duration{}, n: map[string]int{}}
}

// LayerTimes returns the times so far, slowest first (nil when not
// enabled).
func (r *Runner) LayerTimes() []LayerTime { return r.e.times.list() }

// list is the time per group, slowest first (nil when off).
func (l *layerTimes) list() []LayerTime {
	if l == nil {
		return nil
	}
	var out []LayerTime
	for g, d := range l.d {
		out = append(out, LayerTime{Group: g, Seconds: d.Seconds(), Calls: l.n[g]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seconds > out[j].Seconds })
	return out
}
