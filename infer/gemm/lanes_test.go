package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// interleave is n [c][h][w] maps as one [c][h][w][n] map.
func interleave(maps [][]float32, c, hw int) []float32 {
	n := len(maps)
	x := make([]float32, c*hw*n)
	for b, m := range maps {
		for i, v := range m[:c*hw] {
			x[i*n+b] = v
		}
	}
	return x
}

// laneShapes are (channels, h, w, images) with edges that are not
// multiples of a tile, one image, more images than a vector's lanes, and
// tiles inside the map with all 16 lanes (read in place by the C kernels).
var laneShapes = [][4]int{{3, 7, 7, 16}, {2, 13, 9, 5}, {4, 14, 14, 1}, {2, 6, 11, 17}, {3, 5, 8, 16}, {2, 13, 14, 16}, {1, 10, 9, 32}}

// laneBlocks cuts ncols columns into blocks of blk (the last shorter):
// blocks that start and end mid-position when blk is no multiple of n.
func laneBlocks(ncols int, f func(j0, nb int)) {
	for _, blk := range []int{7, 16, 48, ncols} {
		for j0 := 0; j0 < ncols; j0 += blk {
			f(j0, min(blk, ncols-j0))
		}
	}
}

// Every clone of the lane-interleaved Winograd transforms gives the bits
// of its Go twin (the noblas build's), and both give each image's bits of
// the plane-at-a-time transforms (WinoIn4, WinoOut4): the layout changes
// no bit. Blocks start and end mid-tile; ReLU and the residual on and off.
func TestWinoLanesMatchPlanes(t *testing.T) {
	forEachClone(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(41, 42))
		for _, s := range laneShapes {
			c, h, w, n := s[0], s[1], s[2], s[3]
			tw, th := (w+3)/4, (h+3)/4
			tiles := tw * th
			maps := make([][]float32, n)
			for b := range maps {
				maps[b] = fill(r, c*h*w)
			}
			x := interleave(maps, c, h*w)
			// Each image's V, tile-major per channel (vs1 = c·tiles).
			want := make([][]float32, n)
			for b := range want {
				want[b] = make([]float32, 36*c*tiles)
				WinoIn4(maps[b], c, h, w, tw, 0, tiles, want[b], c*tiles)
			}
			// M for the output transform: random, with its images' columns.
			mAll := fill(r, 36*c*tiles*n)
			bias := fill(r, c)
			resMaps := make([][]float32, n)
			for b := range resMaps {
				resMaps[b] = fill(r, c*h*w)
			}
			res := interleave(resMaps, c, h*w)
			laneBlocks(tiles*n, func(j0, nb int) {
				ldv := nb + 3
				vs := c*ldv + 5
				v, vg := make([]float32, 36*vs), make([]float32, 36*vs)
				WinoIn4L(x, c, h, w, n, j0, nb, v, vs, ldv)
				wino4InLGo(x, c, h, w, n, j0, nb, vg, vs, ldv)
				sameBits(t, v, vg, fmt.Sprintf("WinoIn4L %v block %d+%d", s, j0, nb))
				for xi := 0; xi < 36; xi++ {
					for ci := 0; ci < c; ci++ {
						for j := j0; j < j0+nb; j++ {
							tile, b := j/n, j%n
							if got, want1 := v[xi*vs+ci*ldv+j-j0], want[b][xi*c*tiles+ci*tiles+tile]; got != want1 {
								t.Fatalf("WinoIn4L %v: ξ%d c%d tile %d image %d: %v, plane kernel %v", s, xi, ci, tile, b, got, want1)
							}
						}
					}
				}
				// The output transform of M's columns [j0, j0+nb), as
				// the rows of a matrix of ldm columns.
				ldm := nb + 2
				ms := c*ldm + 3
				m := make([]float32, 36*ms)
				for xi := 0; xi < 36; xi++ {
					for o := 0; o < c; o++ {
						copy(m[xi*ms+o*ldm:xi*ms+o*ldm+nb], mAll[(xi*c+o)*tiles*n+j0:])
					}
				}
				for _, relu := range []bool{false, true} {
					for _, rs := range [][]float32{nil, res} {
						y, yg := fill(r, c*h*w*n), make([]float32, c*h*w*n)
						copy(yg, y)
						WinoOut4L(m, ms, ldm, j0, nb, c, h, w, n, bias, rs, relu, y)
						wino4OutLGo(m, ms, ldm, j0, nb, c, h, w, n, bias, rs, relu, yg)
						sameBits(t, y, yg, fmt.Sprintf("WinoOut4L %v block %d+%d relu=%v res=%v", s, j0, nb, relu, rs != nil))
						// Against the plane kernel, image by image, tile by tile.
						for j := j0; j < j0+nb; j++ {
							tile, b := j/n, j%n
							mt := make([]float32, 36*c)
							for xi := 0; xi < 36; xi++ {
								for o := 0; o < c; o++ {
									mt[xi*c+o] = m[xi*ms+o*ldm+j-j0]
								}
							}
							var rb []float32
							if rs != nil {
								rb = resMaps[b]
							}
							yb := make([]float32, c*h*w)
							WinoOut4(mt, c, 1, c, tw, tile, h, w, bias, rb, relu, yb)
							ty, tx := tile/tw, tile%tw
							for o := 0; o < c; o++ {
								for yy := 4 * ty; yy < min(4*ty+4, h); yy++ {
									for xx := 4 * tx; xx < min(4*tx+4, w); xx++ {
										if got, want1 := y[((o*h+yy)*w+xx)*n+b], yb[(o*h+yy)*w+xx]; got != want1 {
											t.Fatalf("WinoOut4L %v: o%d (%d,%d) image %d: %v, plane kernel %v", s, o, yy, xx, b, got, want1)
										}
									}
								}
							}
						}
					}
				}
			})
		}
	})
}

// Every clone of the lane-interleaved im2col copies what its Go twin and
// the plane im2col copy (1×1/2, 3×3/1, 3×3/2, 7×7/2: the classifier's
// kinds), in blocks that start mid-position; every element is written.
func TestIm2colLanesMatchPlanes(t *testing.T) {
	forEachClone(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(43, 44))
		for _, s := range laneShapes {
			c, h, w, n := s[0], s[1], s[2], s[3]
			maps := make([][]float32, n)
			for b := range maps {
				maps[b] = fill(r, c*h*w)
			}
			x := interleave(maps, c, h*w)
			for _, k := range [][3]int{{1, 2, 0}, {3, 1, 1}, {3, 2, 1}, {7, 2, 3}} {
				kk, stride, pad := k[0], k[1], k[2]
				oh, ow := (h+2*pad-kk)/stride+1, (w+2*pad-kk)/stride+1
				want := make([][]float32, n)
				for b := range want {
					want[b] = make([]float32, c*kk*kk*oh*ow)
					Im2col(maps[b], c, h, w, kk, kk, stride, pad, ow, 0, oh*ow, want[b])
				}
				laneBlocks(oh*ow*n, func(j0, nb int) {
					ldc := nb + 3
					a, g := make([]float32, c*kk*kk*ldc), make([]float32, c*kk*kk*ldc)
					for i := range a {
						a[i], g[i] = 1, 1
					}
					Im2colL(x, c, h, w, n, kk, kk, stride, pad, ow, j0, nb, a, ldc)
					im2colLGo(x, c, h, w, n, kk, kk, stride, pad, ow, j0, nb, g, ldc)
					what := fmt.Sprintf("%v k%d/%d block %d+%d", s, kk, stride, j0, nb)
					sameBits(t, a, g, what)
					for row := 0; row < c*kk*kk; row++ {
						for j := j0; j < j0+nb; j++ {
							if got, want1 := a[row*ldc+j-j0], want[j%n][row*oh*ow+j/n]; got != want1 {
								t.Fatalf("%s: row %d column %d: %v, plane im2col %v", what, row, j, got, want1)
							}
						}
					}
				})
			}
		}
	})
}

// Every clone of the lane-interleaved max-pool gives each image the bits
// of the plane max-pool, NaN included (torch propagates it).
func TestMaxPoolLanesMatchPlanes(t *testing.T) {
	forEachClone(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(45, 46))
		for _, s := range [][3]int{{7, 7, 16}, {1, 1, 3}, {2, 5, 17}, {9, 4, 1}, {6, 6, 5}} {
			h, w, n := s[0], s[1], s[2]
			oh, ow := (h+1)/2, (w+1)/2
			maps := make([][]float32, n)
			for b := range maps {
				maps[b] = fill(r, h*w)
			}
			maps[0][h*w/2] = float32(math.NaN())
			x := interleave(maps, 1, h*w)
			got, gotGo := make([]float32, oh*ow*n), make([]float32, oh*ow*n)
			MaxPool3s2L(x, h, w, n, make([]float32, h*ow*n), got)
			maxpoolLGo(x, h, w, n, make([]float32, h*ow*n), gotGo)
			sameBits(t, got, gotGo, fmt.Sprintf("max-pool %v", s))
			for b := 0; b < n; b++ {
				want := make([]float32, oh*ow)
				MaxPool3s2(maps[b], h, w, make([]float32, h*ow), want)
				one := make([]float32, oh*ow)
				for i := range one {
					one[i] = got[i*n+b]
				}
				sameBits(t, one, want, fmt.Sprintf("max-pool %v image %d", s, b))
			}
		}
	})
}
