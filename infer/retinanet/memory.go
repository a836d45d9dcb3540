package retinanet

// PaddedSize is the size an image of w×h pixels has inside the network:
// resized by torchvision's size rule (min_size, max_size), then padded to
// multiples of 32. The job's memory estimate is made from it.
func (m *Model) PaddedSize(w, h int) (pw, ph int) {
	oh, ow := resizeSize(h, w, m.Opt)
	return (ow + 31) / 32 * 32, (oh + 31) / 32 * 32
}

// MaxSide bounds config.json's min_size and max_size: the network's input
// is at most MaxSide pixels on its long side (torchvision has no bound; a
// size of 100000 would ask for hundreds of GB).
const MaxSide = 8192
