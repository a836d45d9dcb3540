package retinanet

import (
	"math"
	"testing"
)

// TestDecodeClampsScale: BoxCoder.decode_single clamps dw and dh at
// log(1000/16) before exp (torchvision's bbox_xform_clip): a delta of 10
// decodes as one of log(62.5), one just under the clamp does not; boxes
// far inside a large image are not clipped. (A mutation survivor of
// forward.go, issue 35.)
func TestDecodeClampsScale(t *testing.T) {
	a := [4]float32{500000, 500000, 500032, 500016} // 32 x 16, far from the edges
	const size = 1 << 20
	clamp := float32(math.Log(62.5))
	at := decode(a, [4]float32{0, 0, clamp, clamp}, size, size)
	if got := decode(a, [4]float32{0, 0, 10, 10}, size, size); got != at {
		t.Fatalf("dw 10 gives %v, the clamp %v", got, at)
	}
	if w, h := at[2]-at[0], at[3]-at[1]; !(math.Abs(float64(w)-62.5*32) < 0.01 && math.Abs(float64(h)-62.5*16) < 0.01) {
		t.Fatalf("clamped box %v is %vx%v, want 2000x1000", at, w, h)
	}
	under := decode(a, [4]float32{0, 0, clamp - 0.01, clamp - 0.01}, size, size)
	if under == at || !(under[2]-under[0] < at[2]-at[0]) {
		t.Fatalf("under the clamp %v, at it %v", under, at)
	}
	// a shift moves the centre by d·width
	if s := decode(a, [4]float32{0.5, -0.25, 0, 0}, size, size); s != [4]float32{500016, 499996, 500048, 500012} {
		t.Fatalf("shifted %v", s)
	}
}
