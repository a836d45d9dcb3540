// Package forest draws synthetic aerial forest images with exact ground
// truth, for training and testing canopy's demo tree detector.
//
// An image is a smooth soil-and-grass background (value noise, a few colour
// patches) with 5–60 tree crowns painted over it, each an irregular round
// blob with radial, sun-side shading, a cast shadow and fine leaf texture.
// About 15% of the crowns are dead (grey and brown, label "Dead"), the rest
// live ("Tree", several greens). About 5% of the images are empty.
//
// Generation is deterministic and each image stands alone: image index i of
// seed s is drawn from a PCG generator seeded with (s, i), so it is the same
// whatever other images are generated and in whatever order.
//
// A Box is the tight box of the crown's visible pixels (what is left after
// later crowns are painted over it), in DeepForest's pixel-edge convention:
// the box covers pixels XMin..XMax-1 and YMin..YMax-1, so XMax-XMin is its
// width. Crowns with fewer than MinVisible visible pixels, or whose box is
// narrower or shorter than MinSide pixels, get no box.
//
// The noise is smooth (no per-pixel white noise), so a 400×400 image stays
// near or below 150 KB as PNG.
package forest

import (
	"image"
	"math"
	"math/rand/v2"
)

// Labels of the two classes, and their ids in the demo model.
const (
	LabelTree = "Tree"
	LabelDead = "Dead"
)

// LabelDict is the demo model's label → id map (DeepForest's label_dict).
var LabelDict = map[string]int{LabelTree: 0, LabelDead: 1}

// Drawing parameters.
const (
	MinCrowns   = 5    // crowns in a non-empty 400×400 image, before dropping hidden ones
	MaxCrowns   = 60   //
	MinRadius   = 6    // crown radius range in pixels
	MaxRadius   = 40   //
	EmptyRate   = 0.05 // probability that an image has no crowns
	DeadRate    = 0.15 // probability that a crown is dead
	MinVisible  = 30   // fewest visible pixels for a crown to get a box
	MinSide     = 3    // smallest box width and height
	refArea     = 400 * 400
	shapeHarmon = 4 // harmonics of the crown outline
)

// Box is one crown's ground truth: the tight box of its visible pixels,
// covering [XMin,XMax)×[YMin,YMax).
type Box struct {
	XMin, YMin, XMax, YMax int
	Label                  string
}

// Generate draws image index of the set seeded by seed, w×h pixels, and
// returns it with its boxes (in painting order; none for an empty image).
func Generate(seed uint64, index int, w, h int) (*image.RGBA, []Box) {
	img, boxes, _ := generate(seed, index, w, h)
	out := make([]Box, len(boxes))
	for i, b := range boxes {
		out[i] = b.Box
	}
	return img, out
}

// crownBox is a Box with the index of its crown in the owner map.
type crownBox struct {
	Box
	crown   int
	visible int
}

// noise is 2-D value noise: random values on a square lattice, smoothly
// interpolated.
type noise struct {
	gw, gh int
	cell   float64
	v      []float32
}

func newNoise(r *rand.Rand, w, h int, cell float64) *noise {
	gw := int(float64(w)/cell) + 3
	gh := int(float64(h)/cell) + 3
	n := &noise{gw: gw, gh: gh, cell: cell, v: make([]float32, gw*gh)}
	for i := range n.v {
		n.v[i] = r.Float32()
	}
	return n
}

// at returns the noise in [0,1] at pixel (x, y); points outside the image
// are clamped to the lattice.
func (n *noise) at(x, y float64) float64 {
	fx, fy := x/n.cell, y/n.cell
	if fx < 0 {
		fx = 0
	}
	if fy < 0 {
		fy = 0
	}
	ix, iy := int(fx), int(fy)
	if ix > n.gw-2 {
		ix, fx = n.gw-2, float64(n.gw-2)
	}
	if iy > n.gh-2 {
		iy, fy = n.gh-2, float64(n.gh-2)
	}
	tx, ty := fx-float64(ix), fy-float64(iy)
	tx = tx * tx * (3 - 2*tx)
	ty = ty * ty * (3 - 2*ty)
	i := iy*n.gw + ix
	a := float64(n.v[i]) + tx*float64(n.v[i+1]-n.v[i])
	b := float64(n.v[i+n.gw]) + tx*float64(n.v[i+n.gw+1]-n.v[i+n.gw])
	return a + ty*(b-a)
}

type rgb struct{ r, g, b float64 }

func (c rgb) scale(f float64) rgb { return rgb{c.r * f, c.g * f, c.b * f} }

func mix(a, b rgb, t float64) rgb {
	return rgb{a.r + t*(b.r-a.r), a.g + t*(b.g-a.g), a.b + t*(b.b-a.b)}
}

func jitter(r *rand.Rand, c rgb, amount float64) rgb {
	f := 1 + amount*(2*r.Float64()-1)
	return rgb{
		c.r * f * (1 + 0.04*(2*r.Float64()-1)),
		c.g * f * (1 + 0.04*(2*r.Float64()-1)),
		c.b * f * (1 + 0.04*(2*r.Float64()-1)),
	}
}

var (
	soilColors = []rgb{{128, 104, 76}, {112, 94, 72}, {140, 122, 92}, {98, 84, 64}}
	grassColor = []rgb{{104, 118, 62}, {120, 128, 70}, {92, 110, 60}, {134, 136, 84}}
	patchColor = []rgb{{150, 138, 104}, {84, 74, 58}, {118, 130, 74}, {160, 150, 120}, {96, 112, 70}}
	treeColors = []rgb{{42, 82, 36}, {58, 104, 44}, {88, 124, 52}, {40, 88, 64}, {70, 96, 40}, {30, 66, 34}}
	deadColors = []rgb{{134, 128, 118}, {126, 102, 78}, {160, 154, 142}, {108, 92, 78}}
)

type crown struct {
	cx, cy, r float64
	amp, ph   [shapeHarmon]float64
	color     rgb
	dead      bool
	tex       float64 // texture strength
	texMix    float64 // blend of the two clump textures
}

// radius returns the crown outline's radius at angle theta (before the fine
// edge jitter).
func (c *crown) radius(theta float64) float64 {
	f := 1.0
	for k := range shapeHarmon {
		f += c.amp[k] * math.Cos(float64(k+2)*theta+c.ph[k])
	}
	return c.r * f
}

type patch struct {
	cx, cy, rx, ry, rot float64
	color               rgb
	strength            float64
}

// generate draws the image and returns its boxes with their crown indices
// and the owner map: the crown index of every pixel, -1 for background.
func generate(seed uint64, index int, w, h int) (*image.RGBA, []crownBox, []int16) {
	if w <= 0 || h <= 0 {
		panic("forest: image size must be positive")
	}
	r := rand.New(rand.NewPCG(seed, uint64(index)))

	// Sun: azimuth and elevation; shadows fall away from it.
	az := 2 * math.Pi * r.Float64()
	elev := (35 + 25*r.Float64()) * math.Pi / 180
	sun := [3]float64{math.Cos(az) * math.Cos(elev), math.Sin(az) * math.Cos(elev), math.Sin(elev)}

	// Background.
	soil := jitter(r, soilColors[r.IntN(len(soilColors))], 0.08)
	grass := jitter(r, grassColor[r.IntN(len(grassColor))], 0.08)
	grassCover := 0.25 + 0.5*r.Float64()
	low := newNoise(r, w, h, 90+60*r.Float64())
	mid := newNoise(r, w, h, 22+10*r.Float64())
	fine := newNoise(r, w, h, 5)
	leaf := newNoise(r, w, h, 2.2)
	clump := newNoise(r, w, h, 5.5)
	clump2 := newNoise(r, w, h, 4)

	patches := make([]patch, r.IntN(4)+1)
	for i := range patches {
		patches[i] = patch{
			cx: float64(w) * r.Float64(), cy: float64(h) * r.Float64(),
			rx: 20 + 70*r.Float64(), ry: 15 + 50*r.Float64(), rot: math.Pi * r.Float64(),
			color:    jitter(r, patchColor[r.IntN(len(patchColor))], 0.06),
			strength: 0.4 + 0.5*r.Float64(),
		}
	}

	img := image.NewRGBA(image.Rect(0, 0, w, h))
	buf := make([]rgb, w*h)
	for y := range h {
		for x := range w {
			fx, fy := float64(x)+0.5, float64(y)+0.5
			t := smooth((low.at(fx, fy)+0.35*(mid.at(fx, fy)-0.5)-(1-grassCover))*4 + 0.5)
			c := mix(soil, grass, t)
			for _, p := range patches {
				dx, dy := fx-p.cx, fy-p.cy
				cs, sn := math.Cos(p.rot), math.Sin(p.rot)
				u, v := (dx*cs+dy*sn)/p.rx, (-dx*sn+dy*cs)/p.ry
				d := u*u + v*v + 0.6*(mid.at(fx, fy)-0.5)
				if d < 1 {
					c = mix(c, p.color, p.strength*smooth((1-d)*3))
				}
			}
			c = c.scale(0.9 + 0.16*mid.at(fx, fy) + 0.08*(fine.at(fx, fy)-0.5))
			buf[y*w+x] = c
		}
	}

	// Crowns.
	n := 0
	if r.Float64() >= EmptyRate {
		n = MinCrowns + r.IntN(MaxCrowns-MinCrowns+1)
		if a := w * h; a != refArea {
			n = int(math.Round(float64(n) * float64(a) / refArea))
			n = max(n, MinCrowns)
		}
	}
	stand := 9 + 19*r.Float64() // typical radius of this stand
	crowns := make([]crown, n)
	for i := range crowns {
		c := &crowns[i]
		c.r = math.Max(MinRadius, math.Min(MaxRadius, stand*math.Exp(0.35*r.NormFloat64())))
		c.cx = -0.3*c.r + (float64(w)+0.6*c.r)*r.Float64()
		c.cy = -0.3*c.r + (float64(h)+0.6*c.r)*r.Float64()
		for k := range shapeHarmon {
			c.amp[k] = (0.09 / float64(k+1)) * r.Float64()
			c.ph[k] = 2 * math.Pi * r.Float64()
		}
		c.dead = r.Float64() < DeadRate
		if c.dead {
			c.color = jitter(r, deadColors[r.IntN(len(deadColors))], 0.08)
			c.tex = 0.45 + 0.2*r.Float64()
		} else {
			c.color = jitter(r, treeColors[r.IntN(len(treeColors))], 0.1)
			c.tex = 0.25 + 0.15*r.Float64()
		}
		c.texMix = r.Float64()
	}

	owner := make([]int16, w*h)
	for i := range owner {
		owner[i] = -1
	}
	shadowLen := 0.35 + 0.35*(1-sun[2])
	for i := range crowns {
		c := &crowns[i]
		reach := c.r * 1.5
		// Cast shadow, offset away from the sun, darkening what is below.
		sx, sy := c.cx-sun[0]*c.r*shadowLen*2, c.cy-sun[1]*c.r*shadowLen*2
		forPixels(w, h, sx, sy, reach, func(x, y int, dx, dy float64) {
			d := math.Hypot(dx, dy)
			R := c.radius(math.Atan2(dy, dx)) * 1.02
			if d < R {
				k := y*w + x
				buf[k] = buf[k].scale(1 - 0.4*smooth((R-d)/4))
			}
		})
		forPixels(w, h, c.cx, c.cy, reach, func(x, y int, dx, dy float64) {
			fx, fy := float64(x)+0.5, float64(y)+0.5
			d := math.Hypot(dx, dy)
			R := c.radius(math.Atan2(dy, dx)) + c.r*0.16*(clump.at(fx, fy)-0.5)
			if d >= R {
				return
			}
			u := d / R
			nz := math.Sqrt(math.Max(0, 1-u*u))
			lam := (dx/R)*sun[0] + (dy/R)*sun[1] + nz*sun[2]
			b := 0.5 + 0.62*math.Max(0, lam)
			if u > 0.85 {
				b *= 1 - 0.9*(u-0.85)
			}
			tx := 1 + c.tex*(leaf.at(fx, fy)-0.5) + 0.6*c.tex*(clump.at(fx, fy)+c.texMix*(clump2.at(fx, fy)-clump.at(fx, fy))-0.5)
			k := y*w + x
			buf[k] = c.color.scale(b * tx)
			owner[k] = int16(i)
		})
	}

	// Boxes of the visible pixels.
	type ext struct{ x0, y0, x1, y1, n int }
	exts := make([]ext, n)
	for i := range exts {
		exts[i] = ext{x0: w, y0: h, x1: -1, y1: -1}
	}
	for y := range h {
		for x := range w {
			o := owner[y*w+x]
			if o < 0 {
				continue
			}
			e := &exts[o]
			e.x0, e.y0 = min(e.x0, x), min(e.y0, y)
			e.x1, e.y1 = max(e.x1, x), max(e.y1, y)
			e.n++
		}
	}
	var boxes []crownBox
	for i, e := range exts {
		if e.n < MinVisible || e.x1+1-e.x0 < MinSide || e.y1+1-e.y0 < MinSide {
			continue
		}
		label := LabelTree
		if crowns[i].dead {
			label = LabelDead
		}
		boxes = append(boxes, crownBox{
			Box:   Box{XMin: e.x0, YMin: e.y0, XMax: e.x1 + 1, YMax: e.y1 + 1, Label: label},
			crown: i, visible: e.n,
		})
	}

	for k, c := range buf {
		img.Pix[4*k+0] = clamp8(c.r)
		img.Pix[4*k+1] = clamp8(c.g)
		img.Pix[4*k+2] = clamp8(c.b)
		img.Pix[4*k+3] = 0xff
	}
	return img, boxes, owner
}

// forPixels calls f for every pixel whose centre lies within reach of
// (cx, cy), with the centre's offset from (cx, cy).
func forPixels(w, h int, cx, cy, reach float64, f func(x, y int, dx, dy float64)) {
	x0 := max(0, int(math.Floor(cx-reach)))
	x1 := min(w-1, int(math.Ceil(cx+reach)))
	y0 := max(0, int(math.Floor(cy-reach)))
	y1 := min(h-1, int(math.Ceil(cy+reach)))
	for y := y0; y <= y1; y++ {
		for x := x0; x <= x1; x++ {
			f(x, y, float64(x)+0.5-cx, float64(y)+0.5-cy)
		}
	}
}

func smooth(t float64) float64 {
	if t <= 0 {
		return 0
	}
	if t >= 1 {
		return 1
	}
	return t * t * (3 - 2*t)
}

func clamp8(v float64) uint8 {
	v = math.Round(v)
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}
