package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// batchConvs are one convolution of each kind the BatchEngine runs: the
// stem's 7×7/2 (im2col), a 1×1 (pointwise), a 1×1/2 and a 3×3/2 (im2col)
// and two 3×3/1 (Winograd F(4×4,3×3)).
func batchConvs(r *rand.Rand) []*nn.Conv {
	mk := func(out, in, k, stride, pad int) *nn.Conv { return randConv(r, out, in, k, stride, pad) }
	return []*nn.Conv{mk(40, 3, 7, 2, 3), mk(36, 40, 1, 1, 0), mk(24, 40, 1, 2, 0), mk(32, 40, 3, 2, 1), mk(40, 40, 3, 1, 1), mk(64, 32, 3, 1, 1)}
}

// randConv is a k×k convolution of random weights and biases.
func randConv(r *rand.Rand, out, in, k, stride, pad int) *nn.Conv {
	c := &nn.Conv{Name: fmt.Sprintf("%dx%d/%d %d→%d", k, k, stride, in, out), Out: out, In: in, KH: k, KW: k, Stride: stride, Pad: pad,
		W: make([]float32, out*in*k*k), B: make([]float32, out)}
	for i := range c.W {
		c.W[i] = float32(r.NormFloat64() / math.Sqrt(float64(in*k*k)))
	}
	for i := range c.B {
		c.B[i] = float32(r.NormFloat64() * 0.1)
	}
	return c
}

func randBatch(r *rand.Rand, c, n, h, w int) Batch {
	x := Batch{c, n, h, w, make([]float32, c*n*h*w)}
	for i := range x.D {
		x.D[i] = float32(r.NormFloat64())
	}
	return x
}

// one is image b of x as a batch of one.
func (x Batch) one(b int) Batch {
	y := Batch{x.C, 1, x.H, x.W, make([]float32, x.C*x.H*x.W)}
	for c := 0; c < x.C; c++ {
		copy(y.D[c*x.H*x.W:], x.Plane(c, b))
	}
	return y
}

// at is value (yy, xx) of channel c of image b.
func (x Batch) at(c, b, yy, xx int) float32 { return x.D[((c*x.H+yy)*x.W+xx)*x.N+b] }

// Every kind of convolution of a batch of 5 images (odd sizes, residual,
// ReLU) gives each image exactly the bits it gets alone, on 1 or 3
// workers (the Winograd layers' 100 columns run in fused jobs on 1, by
// rows and columns on 3 and alone), and in every clone of the kernels
// (generic, AVX2, AVX-512): a
// crop's result never depends on the batch, the threads or the CPU's
// instruction set.
func TestBatchImagesIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	defer gemm.SetSIMD(gemm.Kernels())
	for _, c := range batchConvs(r) {
		x := randBatch(r, c.In, 5, 17, 13) // 20 tiles an image: jobs start mid-image
		oh, ow := (x.H+2*c.Pad-c.KH)/c.Stride+1, (x.W+2*c.Pad-c.KW)/c.Stride+1
		res := randBatch(r, c.Out, 5, oh, ow)
		want := NewBatchEngine(3).Conv(c, x, true, &res)
		for s := gemm.Generic; s <= gemm.BestKernels(); s++ {
			if err := gemm.SetSIMD(s); err != nil {
				t.Fatal(err)
			}
			for _, threads := range []int{1, 3} {
				e := NewBatchEngine(threads)
				got := e.Conv(c, x, true, &res)
				for i := range want.D {
					if math.Float32bits(got.D[i]) != math.Float32bits(want.D[i]) {
						t.Fatalf("%s %s %d threads: [%d] %v, want %v", c.Name, s, threads, i, got.D[i], want.D[i])
					}
				}
				for b := 0; b < x.N; b++ {
					rb := res.one(b)
					alone := e.Conv(c, x.one(b), true, &rb)
					for ch := 0; ch < c.Out; ch++ {
						p, q := alone.Plane(ch, 0), want.Plane(ch, b)
						for i := range p {
							if math.Float32bits(p[i]) != math.Float32bits(q[i]) {
								t.Fatalf("%s %s: image %d alone differs from its batch at channel %d [%d]: %v, %v", c.Name, s, b, ch, i, p[i], q[i])
							}
						}
					}
				}
			}
		}
	}
}

// ConvPair gives the bits of its two convolutions run one after the
// other (Conv with the residual, then Conv), in every clone, on 1 or 3
// workers, with and without a residual, where CanPair pairs them (5
// images of 17×13: 1,105 columns, 4 or 12 jobs) and where it does not (1
// image of 7×7: too few columns, so grid cuts the rows too; a 3×3;
// widths that do not chain), and CanPair says which.
func TestConvPairSameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	defer gemm.SetSIMD(gemm.Kernels())
	c1, c2 := randConv(r, 48, 24, 1, 1, 0), randConv(r, 20, 48, 1, 1, 0)
	big, small := randBatch(r, 24, 5, 17, 13), randBatch(r, 24, 1, 7, 7)
	for _, x := range []Batch{big, small} {
		res := randBatch(r, 48, x.N, x.H, x.W)
		for s := gemm.Generic; s <= gemm.BestKernels(); s++ {
			if err := gemm.SetSIMD(s); err != nil {
				t.Fatal(err)
			}
			for _, threads := range []int{1, 3} {
				e := NewBatchEngine(threads)
				if got, want := e.CanPair(c1, c2, x), x.N == 5; got != want {
					t.Fatalf("%d images, %d threads: CanPair %v, want %v", x.N, threads, got, want)
				}
				for _, rp := range []*Batch{&res, nil} {
					a, b := e.ConvPair(c1, x, rp, c2)
					wa := e.Conv(c1, x, true, rp)
					wb := e.Conv(c2, wa, true, nil)
					for _, p := range [][2]Batch{{a, wa}, {b, wb}} {
						if p[0].C != p[1].C || p[0].N != p[1].N || p[0].H != p[1].H || p[0].W != p[1].W {
							t.Fatalf("shape %dx%dx%dx%d, want %dx%dx%dx%d", p[0].C, p[0].N, p[0].H, p[0].W, p[1].C, p[1].N, p[1].H, p[1].W)
						}
						for i := range p[1].D {
							if math.Float32bits(p[0].D[i]) != math.Float32bits(p[1].D[i]) {
								t.Fatalf("%d images, %s, %d threads, residual %v: %d channels [%d] %v, want %v", x.N, s, threads, rp != nil, p[1].C, i, p[0].D[i], p[1].D[i])
							}
						}
					}
				}
			}
		}
	}
	e := NewBatchEngine(1)
	if e.CanPair(c1, randConv(r, 20, 40, 1, 1, 0), big) || e.CanPair(randConv(r, 48, 24, 3, 1, 1), c2, big) || e.CanPair(c2, c1, big) {
		t.Fatal("CanPair pairs convolutions that are not two chained 1×1s")
	}
}

// Every kind of convolution is the convolution, within float32 rounding
// of the float64 one, per output value:
//   - a product (im2col, 1×1): one chain of K = in·kh·kw fused steps, then
//     the bias and the residual adds: |Δ| ≤ γ_{K+2}·(Σ|w·x| + |b| + |res|),
//     γ_n = n·u/(1−n·u), u = 2⁻²⁴;
//   - Winograd F(4×4,3×3): in the transforms, each value passes at most
//     6 roundings in V = BᵀdB (two passes of two adds and a product by 4
//     or 5), 1 in U (made in float64, rounded once), in in the chain over
//     the channels, 8 in Y = AᵀMA, 2 in the bias and residual adds: so
//     |Δ| ≤ γ_{in+17}·(E + |b| + |res|) with E = |Aᵀ|(Σ_ci |G||g||Gᵀ| ⊙
//     |Bᵀ||d||B|)|A|, the same computation on absolute values.
func TestBatchConvIsConvolution(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	u := math.Ldexp(1, -24)
	gamma := func(n int) float64 { return float64(n) * u / (1 - float64(n)*u) }
	for _, c := range batchConvs(r) {
		x := randBatch(r, c.In, 2, 17, 13)
		oh, ow := (x.H+2*c.Pad-c.KH)/c.Stride+1, (x.W+2*c.Pad-c.KW)/c.Stride+1
		res := randBatch(r, c.Out, 2, oh, ow)
		got := NewBatchEngine(2).Conv(c, x, false, &res)
		worst := 0.0
		for b := 0; b < x.N; b++ {
			var wino [][]float64
			if UseWinograd(c) {
				wino = winoAbs(c, x, b)
			}
			for o := 0; o < c.Out; o++ {
				for oy := 0; oy < oh; oy++ {
					for ox := 0; ox < ow; ox++ {
						s, abs := float64(c.B[o]), math.Abs(float64(c.B[o]))
						var sum, sumAbs float64
						for ci := 0; ci < c.In; ci++ {
							for ky := 0; ky < c.KH; ky++ {
								for kx := 0; kx < c.KW; kx++ {
									iy, ix := oy*c.Stride-c.Pad+ky, ox*c.Stride-c.Pad+kx
									if iy < 0 || iy >= x.H || ix < 0 || ix >= x.W {
										continue
									}
									p := float64(c.W[((o*c.In+ci)*c.KH+ky)*c.KW+kx]) * float64(x.at(ci, b, iy, ix))
									sum += p
									sumAbs += math.Abs(p)
								}
							}
						}
						rv := float64(res.at(o, b, oy, ox))
						s += sum + rv
						abs += math.Abs(rv)
						bound := gamma(c.In*c.KH*c.KW+2) * (sumAbs + abs)
						if wino != nil {
							bound = gamma(c.In+17) * (wino[o][oy*ow+ox] + abs)
						}
						g := float64(got.at(o, b, oy, ox))
						d := math.Abs(g - s)
						if !(d <= bound) {
							t.Fatalf("%s image %d o%d (%d,%d): %v, float64 %v: |Δ| %g > bound %g", c.Name, b, o, oy, ox, g, s, d, bound)
						}
						worst = max(worst, d/bound)
					}
				}
			}
		}
		t.Logf("%s: worst |Δ| is %.2g of its bound", c.Name, worst)
	}
}

// winoAbs is E of TestBatchConvIsConvolution for image b: the F(4×4,3×3)
// computation on absolute values, per output channel and position.
func winoAbs(c *nn.Conv, x Batch, b int) [][]float64 {
	G := [6][3]float64{{0.25, 0, 0}, {1.0 / 6, 1.0 / 6, 1.0 / 6}, {1.0 / 6, 1.0 / 6, 1.0 / 6},
		{1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, 1.0 / 12, 1.0 / 6}, {0, 0, 1}}
	BT := [6][6]float64{{4, 0, 5, 0, 1, 0}, {0, 4, 4, 1, 1, 0}, {0, 4, 4, 1, 1, 0}, {0, 2, 1, 2, 1, 0}, {0, 2, 1, 2, 1, 0}, {0, 4, 0, 5, 0, 1}}
	AT := [4][6]float64{{1, 1, 1, 1, 1, 0}, {0, 1, 1, 2, 2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, 1, 8, 8, 1}}
	out := make([][]float64, c.Out)
	for o := range out {
		out[o] = make([]float64, x.H*x.W)
	}
	u := make([][6][6]float64, c.Out*c.In)
	for i := range u {
		var t [6][3]float64
		for r := 0; r < 6; r++ {
			for k := 0; k < 3; k++ {
				for q := 0; q < 3; q++ {
					t[r][k] += G[r][q] * math.Abs(float64(c.W[i*9+q*3+k]))
				}
			}
		}
		for r := 0; r < 6; r++ {
			for s := 0; s < 6; s++ {
				for k := 0; k < 3; k++ {
					u[i][r][s] += t[r][k] * G[s][k]
				}
			}
		}
	}
	for ty := 0; ty < (x.H+3)/4; ty++ {
		for tx := 0; tx < (x.W+3)/4; tx++ {
			v := make([][6][6]float64, c.In)
			for ci := range v {
				var d, q [6][6]float64
				for r := 0; r < 6; r++ {
					for s := 0; s < 6; s++ {
						if yy, xx := 4*ty-1+r, 4*tx-1+s; yy >= 0 && yy < x.H && xx >= 0 && xx < x.W {
							d[r][s] = math.Abs(float64(x.at(ci, b, yy, xx)))
						}
					}
				}
				for i := 0; i < 6; i++ {
					for s := 0; s < 6; s++ {
						for k := 0; k < 6; k++ {
							q[i][s] += BT[i][k] * d[k][s]
						}
					}
				}
				for i := 0; i < 6; i++ {
					for j := 0; j < 6; j++ {
						for k := 0; k < 6; k++ {
							v[ci][i][j] += q[i][k] * BT[j][k]
						}
					}
				}
			}
			for o := 0; o < c.Out; o++ {
				var m, s [6][6]float64
				for ci := 0; ci < c.In; ci++ {
					for i := 0; i < 6; i++ {
						for j := 0; j < 6; j++ {
							m[i][j] += u[o*c.In+ci][i][j] * v[ci][i][j]
						}
					}
				}
				for i := 0; i < 4; i++ {
					for j := 0; j < 6; j++ {
						for k := 0; k < 6; k++ {
							s[i][j] += AT[i][k] * m[k][j]
						}
					}
				}
				for i := 0; i < 4; i++ {
					for j := 0; j < 4; j++ {
						yy, xx := 4*ty+i, 4*tx+j
						if yy >= x.H || xx >= x.W {
							continue
						}
						for k := 0; k < 6; k++ {
							out[o][yy*x.W+xx] += s[i][k] * AT[j][k]
						}
					}
				}
			}
		}
	}
	return out
}

// The max-pool of a batch is each plane's.
func TestBatchMaxPool(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	x := randBatch(r, 3, 4, 9, 8)
	got := NewBatchEngine(2).MaxPool3s2(x)
	for b := 0; b < x.N; b++ {
		one := NewEngine(1).MaxPool3s2(Fmap{x.C, x.H, x.W, x.one(b).D})
		for c := 0; c < x.C; c++ {
			for i, v := range got.Plane(c, b) {
				if w := one.D[c*one.H*one.W+i]; math.Float32bits(v) != math.Float32bits(w) {
					t.Fatalf("image %d c%d [%d]: %v, want %v", b, c, i, v, w)
				}
			}
		}
	}
}

// The nearest-upsampled add of a batch is each image's AddUpsampled, at
// 2× and at a size that is not (the FPN's odd levels).
func TestBatchUpsampleAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	for _, s := range [][2]int{{4, 8}, {5, 9}} {
		top := randBatch(r, 3, 5, s[0], s[0]+1)
		lat := randBatch(r, 3, 5, s[1], s[1]+2)
		want := make([]Fmap, lat.N)
		for b := range want {
			l := lat.one(b)
			AddUpsampled(Fmap{l.C, l.H, l.W, l.D}, Fmap{top.C, top.H, top.W, top.one(b).D}, parallel1)
			want[b] = Fmap{l.C, l.H, l.W, l.D}
		}
		NewBatchEngine(2).UpsampleAdd(lat, top)
		for b := range want {
			for i, v := range lat.one(b).D {
				if math.Float32bits(v) != math.Float32bits(want[b].D[i]) {
					t.Fatalf("%v image %d [%d]: %v, want %v", s, b, i, v, want[b].D[i])
				}
			}
		}
	}
}

func parallel1(n int, f func(worker, job int)) { parallel(1, n, f) }
