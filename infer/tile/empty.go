package tile

// The emptiness check of --skip-empty (off by default: DeepForest 2.1.0's
// predict_tile runs the model on every window). A window is empty when it
// holds no data (every pixel nodata, or transparent) or no picture (every
// pixel one colour): such a window is given no detections without running
// the model. With the check on, results can differ from DeepForest's where
// the model would have found a box in a uniform window.

// NoData is a raster's nodata rule: bands 1–3's nodata values
// (gdal.Info.NoData) and which bands have one (gdal.Info.HasNoData).
type NoData struct {
	Has   [3]bool
	Value [3]float64
}

// Sample is a raster's sample type (gdal.Samples.Pix8 or Pix16).
type Sample interface{ ~uint8 | ~uint16 }

// EmptyWindow reports whether a w×h window is empty. pix holds the
// window's samples as stored, as three planes R, G, B of w·h samples each
// (rows top first: gdal.Samples.Pix8 or Pix16); alpha is its alpha or mask
// plane (gdal.Samples.Alpha), nil when the raster has none. A pixel has no
// data when its three samples equal their bands' nodata values (every band
// must have one: a nodata value on one or two bands alone makes no pixel
// nodata, as rasterio's dataset mask and gdalwarp read nodata), or when
// its alpha is 0. The window is empty when
//   - no pixel has data (all nodata, all alpha 0, or a mix of the two); or
//   - every pixel has the same three samples (all three bands constant).
//
// A window mixing pixels without data and pixels with it is not empty
// unless it is one value throughout. Planes that do not hold 3·w·h samples
// (or an alpha that is not w·h long) are not called empty: that is the
// caller's error, and the model runs.
//
// The cost is a scan that stops at the first pixel that differs from the
// first one (the constant check) and at the first pixel with data: a window
// of imagery is decided within its first pixels, an empty one is read
// through once or twice.
func EmptyWindow[S Sample](w, h int, pix []S, alpha []uint8, nd NoData) bool {
	n := w * h
	if w < 1 || h < 1 || len(pix) != 3*n || (alpha != nil && len(alpha) != n) {
		return false
	}
	r, g, b := pix[:n], pix[n:2*n], pix[2*n:]
	if r0, g0, b0 := r[0], g[0], b[0]; all(r, r0) && all(g, g0) && all(b, b0) {
		return true
	}
	var v [3]S
	nodata := nd.Has[0] && nd.Has[1] && nd.Has[2]
	for k := range v {
		x, ok := sampleOf[S](nd.Value[k])
		nodata = nodata && ok // a nodata value no sample can hold matches nothing
		v[k] = x
	}
	if !nodata && alpha == nil {
		return false
	}
	for i := range n {
		if nodata && r[i] == v[0] && g[i] == v[1] && b[i] == v[2] {
			continue
		}
		if alpha != nil && alpha[i] == 0 {
			continue
		}
		return false
	}
	return true
}

// sampleOf is the sample equal to the nodata value v, if there is one.
func sampleOf[S Sample](v float64) (S, bool) {
	var maxS S
	maxS--
	if !(v >= 0 && v <= float64(maxS)) || v != float64(uint64(v)) {
		return 0, false
	}
	return S(v), true
}

func all[S Sample](p []S, v S) bool {
	for _, x := range p {
		if x != v {
			return false
		}
	}
	return true
}
