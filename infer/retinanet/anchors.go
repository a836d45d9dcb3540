package retinanet

import "math"

// anchorSizes are torchvision's default RetinaNet sizes per level,
// (x, int(x·2^(1/3)), int(x·2^(2/3))) for x = 32..512.
func anchorSizes(level int) [3]int {
	x := 32 << level
	return [3]int{x, int(float64(x) * math.Pow(2, 1.0/3)), int(float64(x) * math.Pow(2, 2.0/3))}
}

// cellAnchors are the 9 base anchors of a level, ratio-major (a = r·3 + s),
// in float32 with torch.round's half-to-even.
func cellAnchors(level int) [NumAnchors][4]float32 {
	var out [NumAnchors][4]float32
	sizes := anchorSizes(level)
	for r, ar := range [3]float32{0.5, 1.0, 2.0} {
		hr := float32(math.Sqrt(float64(ar)))
		wr := 1 / hr
		for s, sz := range sizes {
			ws := wr * float32(sz)
			hs := hr * float32(sz)
			out[r*3+s] = [4]float32{
				float32(math.RoundToEven(float64(-ws / 2))),
				float32(math.RoundToEven(float64(-hs / 2))),
				float32(math.RoundToEven(float64(ws / 2))),
				float32(math.RoundToEven(float64(hs / 2))),
			}
		}
	}
	return out
}

// anchor returns anchor number idx of a level whose grid is gh×gw on a padded
// image ph×pw: stride = padded // grid, shift = (x·stride_w, y·stride_h).
func anchor(cells *[NumAnchors][4]float32, idx, gh, gw, ph, pw int) [4]float32 {
	loc, a := idx/NumAnchors, idx%NumAnchors
	y, x := loc/gw, loc%gw
	sy, sx := float32(y*(ph/gh)), float32(x*(pw/gw))
	c := cells[a]
	return [4]float32{sx + c[0], sy + c[1], sx + c[2], sy + c[3]}
}
