package gpu

import (
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/imagefile"
)

// Source images on the device: an image goes up once, as its 8-bit
// samples when every value is one (imagefile.ToPlanes: a quarter of the
// float32 bytes), else as float32 planes. The detector's transform and the
// crop classifier's both read them so; a detector may keep them after its
// transform (Held, by key: a tile run's global window index) for the crops
// later cut from them, so a window's pixels go up once for both.

// Source is an image on the device: W×H, three planes of 8-bit samples
// (Eight) or of float32 values.
type Source struct {
	Map   Map
	Eight bool
	W, H  int
}

// Words is the source's size in float32 words.
func (s Source) Words() int { return s.Map.Words() }

// UploadSource queues img's upload to a buffer of the engine's; u8, when
// not nil, holds its 8-bit samples (made here when nil and img's values
// are 8-bit samples). The caller Puts (or Holds) s.Map after the kernels
// that read it.
func (g *Engine) UploadSource(img imagefile.Image, u8 []byte) Source {
	s := Source{W: img.W, H: img.H}
	if u8 == nil {
		b := make([]byte, len(img.Pix))
		if imagefile.ToPlanes(img.Pix, b) {
			u8 = b
		}
	}
	if u8 != nil {
		s.Map, s.Eight = g.Alloc(1, 1, 1, (len(u8)+3)/4), true
		if g.Err == nil {
			g.Fail(g.Dev.UploadBytes(s.Map.P, u8))
		}
	} else {
		s.Map = g.Alloc(1, 1, 1, len(img.Pix))
		g.UploadAsync(s.Map.P, img.Pix)
	}
	g.Uploads++
	return s
}

// Pointers are the source's 8-bit and float32 pointers as the kernels
// take them (one of them 0).
func (s Source) Pointers() (s8, s32 cuda.Ptr) {
	if s.Eight {
		return s.Map.P, 0
	}
	return 0, s.Map.P
}

// Held is the sources a detector kept on the device after its transform,
// by key, oldest first, within Budget bytes (a new one past it drops the
// oldest). Its buffers are the engine's but never on the free list until
// dropped.
type Held struct {
	Budget int64
	used   int64
	keys   []int
	m      map[int]Source
}

// HoldSources makes the engine keep sources its caller Holds, within
// budget bytes (0: none kept; what is held already is dropped).
func (g *Engine) HoldSources(budget int64) {
	g.DropHeld(func(int) bool { return true })
	if budget <= 0 {
		g.held = nil
		return
	}
	g.held = &Held{Budget: budget, m: map[int]Source{}}
}

// Holds says whether the engine keeps sources (HoldSources).
func (g *Engine) Holds() bool { return g.held != nil }

// Hold keeps s under key when the engine keeps sources (replacing one
// held under key), else returns its buffer to the free list, after the
// kernels already queued that read it.
func (g *Engine) Hold(key int, s Source) {
	h := g.held
	if h == nil || int64(4*s.Words()) > h.Budget {
		g.Put(s.Map)
		return
	}
	g.DropHeld(func(k int) bool { return k == key })
	h.m[key] = s
	h.keys = append(h.keys, key)
	h.used += int64(4 * s.Words())
	for h.used > h.Budget {
		old := h.keys[0]
		h.keys = h.keys[1:]
		if o, ok := h.m[old]; ok {
			delete(h.m, old)
			h.used -= int64(4 * o.Words())
			g.Put(o.Map)
		}
	}
}

// HeldSource is the source held under key.
func (g *Engine) HeldSource(key int) (Source, bool) {
	if g.held == nil {
		return Source{}, false
	}
	s, ok := g.held.m[key]
	return s, ok
}

// DropHeld returns the held sources whose keys drop says to the free
// list.
func (g *Engine) DropHeld(drop func(key int) bool) {
	h := g.held
	if h == nil {
		return
	}
	keep := h.keys[:0]
	for _, k := range h.keys {
		s, ok := h.m[k]
		if !ok {
			continue
		}
		if drop(k) {
			delete(h.m, k)
			h.used -= int64(4 * s.Words())
			g.Put(s.Map)
			continue
		}
		keep = append(keep, k)
	}
	h.keys = keep
}
