// Package croptol holds the derived probability tolerance of the crop
// classifier's tests: canopy's probabilities against torch's (infer/crop)
// and one engine's against another's end to end (jobs). It takes the
// network's parts rather than an infer/crop value so that infer/crop's own
// tests can use it.
package croptol

import (
	"math"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/resnet"
)

// Net is what the tolerance needs of a classifier: its ResNet body, its fc
// weights ([Classes][Body.Channels[3]]), and its crop transform (Apply,
// to a Size[0]×Size[1] input).
type Net struct {
	Body    *resnet.Body
	FCW     []float32
	Classes int
	Apply   func(pix []float32, w, h int) ([]float32, error)
	Size    [2]int
}

// ProbTolerance is how far a probability may be from another float32
// side's on these crops, derived from the computation (both sides float32,
// summing in different orders; canopy's 3×3 stride-1 layers Winograd
// F(4×4,3×3)), with the probabilistic model of rounding (independent
// errors of relative size up to u = 2⁻²⁴ add as a random walk, so a sum of
// K terms is off by about u·√K of its terms' magnitude):
//   - layer l (K_l = in·kh·kw products per output) adds a relative error
//     c_l·u·√K_l to its outputs, c_l = 8 for a Winograd layer (its output
//     transform Aᵀ multiplies by up to 8), else 1;
//   - the network's blocks, each batch-normalised with a residual path,
//     carry a relative error forward without growing it, and the layers'
//     errors are independent, so the pooled features end with a relative
//     (ℓ2) error ε = u·√(Σ_l c_l²·K_l) (fc's sum included) on each side,
//     √2·ε apart;
//   - a logit z_k = b_k + w_k·pooled is then off by at most
//     |w_k|₂·√2·ε·|pooled|₂ (Cauchy–Schwarz);
//   - softmax's Jacobian has rows of absolute sum 2p(1−p) ≤ ½, so a
//     probability is off by at most ½ of the largest logit's error.
//
// The largest |w_k|₂·|pooled|₂ over the crops (pooled on the CPU engine)
// makes it one tolerance per network. It returns ε and that largest scale
// too, for the log.
func ProbTolerance(n Net, crops []imagefile.Image) (tol, eps, scale float64, err error) {
	var sum float64
	for _, c := range n.Body.Convs() {
		cl := 1.0
		if cpu.UseWinograd(c) {
			cl = 8
		}
		sum += cl * cl * float64(c.In*c.KH*c.KW)
	}
	ch := n.Body.Channels[3]
	sum += float64(ch) // fc
	eps = math.Ldexp(1, -24) * math.Sqrt(sum)
	eng := cpu.NewBatchEngine(2)
	for _, cr := range crops {
		x := eng.Batch(3, 1, n.Size[0], n.Size[1])
		in, err := n.Apply(cr.Pix, cr.W, cr.H)
		if err != nil {
			return 0, 0, 0, err
		}
		x.SetImage(0, in)
		c5 := resnet.Features[cpu.Batch](n.Body, eng, x, 5)[2]
		var p2 float64 // |pooled|₂²: each channel's mean over the map, as float32
		hw := c5.H * c5.W
		for c := 0; c < ch; c++ {
			var s float64
			for _, v := range c5.D[c*hw : (c+1)*hw] {
				s += float64(v)
			}
			p := float64(float32(s / float64(hw)))
			p2 += p * p
		}
		eng.Put(c5)
		for k := 0; k < n.Classes; k++ {
			var w2 float64
			for _, w := range n.FCW[k*ch : (k+1)*ch] {
				w2 += float64(w) * float64(w)
			}
			scale = max(scale, math.Sqrt(w2*p2))
		}
	}
	return 0.5 * math.Sqrt2 * eps * scale, eps, scale, nil
}
