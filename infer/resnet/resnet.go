// Package resnet is torchvision's ResNet body (ResNet-18/34/50/101/152: the
// stem and layer1..layer4), the part canopy's networks share: RetinaNet's
// backbone (infer/retinanet) and DeepForest's CropModel classifier (body,
// global average pool, fc). Load takes its convolutions from a state dict
// under a prefix, batch norm folded; Features runs it on any engine
// (nn.Backend: infer/cpu, or the GPU engine) and gives C3..C5.
package resnet

import (
	"fmt"
	"strconv"

	"github.com/canopy-hpc/canopy/infer/nn"
)

// Block is a BasicBlock (C3 nil) or a Bottleneck.
type Block struct {
	C1, C2, C3 *nn.Conv // C3 nil for BasicBlock
	Down       *nn.Conv
}

// Body is a loaded ResNet body.
type Body struct {
	// Arch is "resnet18", "resnet34", "resnet50", "resnet101",
	// "resnet152", or "resnet-%dblocks" for another depth.
	Arch   string
	Stem   *nn.Conv
	Layers [4][]Block
	// Channels are the widths of layer1..layer4's outputs (C2..C5):
	// 64, 128, 256, 512, times 4 for Bottleneck bodies.
	Channels [4]int
}

// Load takes a body from t under prefix (RetinaNet's "backbone.body.", a
// classifier's ""): the depth (Bottleneck or BasicBlock, blocks per layer)
// comes from the tensors' names. A missing or misshapen tensor is left in
// t's errors (t.Err); a layer with no blocks is an error here.
func Load(t *nn.Take, body string) (*Body, error) {
	m := &Body{}
	m.Stem = nn.LoadConv(t, body+"conv1", body+"bn1", 64, 3, 7, 2, 3)
	bottleneck := t.Has(body + "layer1.0.conv3.weight")
	widths := [4]int{64, 128, 256, 512}
	exp := 1
	if bottleneck {
		exp = 4
	}
	in := 64
	total := 0
	for L := 0; L < 4; L++ {
		n := 0
		for t.Has(body + "layer" + strconv.Itoa(L+1) + "." + strconv.Itoa(n) + ".conv1.weight") {
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("no blocks in %slayer%d", body, L+1)
		}
		total += n
		wd := widths[L]
		for b := 0; b < n; b++ {
			p := body + "layer" + strconv.Itoa(L+1) + "." + strconv.Itoa(b)
			stride := 1
			if b == 0 && L > 0 {
				stride = 2
			}
			var blk Block
			if bottleneck {
				blk.C1 = nn.LoadConv(t, p+".conv1", p+".bn1", wd, in, 1, 1, 0)
				blk.C2 = nn.LoadConv(t, p+".conv2", p+".bn2", wd, wd, 3, stride, 1)
				blk.C3 = nn.LoadConv(t, p+".conv3", p+".bn3", wd*exp, wd, 1, 1, 0)
			} else {
				blk.C1 = nn.LoadConv(t, p+".conv1", p+".bn1", wd, in, 3, stride, 1)
				blk.C2 = nn.LoadConv(t, p+".conv2", p+".bn2", wd, wd, 3, 1, 1)
			}
			if t.Has(p + ".downsample.0.weight") {
				blk.Down = nn.LoadConv(t, p+".downsample.0", p+".downsample.1", wd*exp, in, 1, stride, 0)
			} else if b == 0 && (stride != 1 || in != wd*exp) {
				t.Fail("missing tensor " + p + ".downsample.0.weight")
			}
			in = wd * exp
			m.Layers[L] = append(m.Layers[L], blk)
		}
		m.Channels[L] = wd * exp
	}
	depth := map[[2]int]int{{8, 0}: 18, {16, 0}: 34, {16, 1}: 50, {33, 1}: 101, {50, 1}: 152}
	key := [2]int{total, 0}
	if bottleneck {
		key[1] = 1
	}
	m.Arch = "resnet" + strconv.Itoa(depth[key])
	if depth[key] == 0 {
		m.Arch = fmt.Sprintf("resnet-%dblocks", total)
	}
	return m, nil
}

// Convs lists the body's convolutions: the stem, then each block's in
// order (C1, C2, C3, Down).
func (m *Body) Convs() []*nn.Conv {
	cs := []*nn.Conv{m.Stem}
	for L := range m.Layers {
		for _, b := range m.Layers[L] {
			for _, c := range []*nn.Conv{b.C1, b.C2, b.C3, b.Down} {
				if c != nil {
					cs = append(cs, c)
				}
			}
		}
	}
	return cs
}

// Features runs the body on x (put back, like every intermediate, as
// soon as it is dead) and returns C3, C4 and C5, the outputs of layer2,
// layer3 and layer4, from level first (3, 4 or 5) up; the levels below
// first are put back too and left as T's zero value (a classifier asks
// for C5 alone).
func Features[T any](m *Body, e nn.Backend[T], x T, first int) [3]T {
	h := e.Conv(m.Stem, x, true, nil)
	e.Put(x)
	h2 := e.MaxPool3s2(h)
	e.Put(h)
	h = h2
	var c [3]T
	pe, canPair := e.(nn.PairBackend[T])
	for L := 0; L < 4; L++ {
		var next T // the block's first convolution, run with the last block's
		paired := false
		for bi, b := range m.Layers[L] {
			id := h
			if b.Down != nil {
				id = e.Conv(b.Down, h, false, nil)
			}
			var out T
			if b.C3 != nil {
				t1 := next
				if !paired {
					t1 = e.Conv(b.C1, h, true, nil)
				}
				t2 := e.Conv(b.C2, t1, true, nil)
				e.Put(t1)
				paired = false
				if nb := bi + 1; canPair && nb < len(m.Layers[L]) && m.Layers[L][nb].Down == nil && m.Layers[L][nb].C3 != nil && pe.CanPair(b.C3, m.Layers[L][nb].C1, t2) {
					out, next = pe.ConvPair(b.C3, t2, &id, m.Layers[L][nb].C1)
					paired = true
				} else {
					out = e.Conv(b.C3, t2, true, &id)
				}
				e.Put(t2)
			} else {
				t1 := e.Conv(b.C1, h, true, nil)
				out = e.Conv(b.C2, t1, true, &id)
				e.Put(t1)
			}
			if b.Down != nil {
				e.Put(id)
			}
			if !(L > 1 && (e.Same(c[0], h) || e.Same(c[1], h))) {
				e.Put(h)
			}
			h = out
		}
		if L > 0 && L+2 >= first {
			c[L-1] = h
		}
	}
	return c
}
