package retinanet

import "math"

// expd is e^x in float64: fdlibm's algorithm (the argument reduced by k·ln 2
// in two parts, then a degree-5 Remez polynomial), written so that every
// operation rounds once and nothing is fused. kernels.cu's canopy_exp is the
// same sequence in C, so the GPU's postprocess computes the sigmoid and the
// box decoding to the CPU's bits (math.Exp is assembly on amd64 and arm64,
// whose last bit can differ from a GPU's exp). Its error is under one ulp,
// as math.Exp's; the float32 results it feeds agree with math.Exp's except
// when the exact value lies within an ulp of float64 of a float32 rounding
// boundary.
func expd(x float64) float64 {
	const (
		ln2Hi = 6.93147180369123816490e-01
		ln2Lo = 1.90821492927058770002e-10
		log2e = 1.44269504088896338700e+00
		p1    = 1.66666666666666657415e-01
		p2    = -2.77777777770155933842e-03
		p3    = 6.61375632143793436117e-05
		p4    = -1.65339022054652515390e-06
		p5    = 4.13813679705723846039e-08
		near0 = 1.0 / (1 << 28)
	)
	switch {
	case x != x:
		return x
	case x > 7.09782712893383973096e+02:
		return math.Inf(1)
	case x < -7.45133219101941108420e+02:
		return 0
	case -near0 < x && x < near0:
		return 1 + x
	}
	k := 0
	if x < 0 {
		k = int(float64(log2e*x) - 0.5)
	} else if x > 0 {
		k = int(float64(log2e*x) + 0.5)
	}
	kd := float64(k)
	hi := x - float64(kd*ln2Hi)
	lo := float64(kd * ln2Lo)
	r := hi - lo
	t := float64(r * r)
	c := r - float64(t*(p1+float64(t*(p2+float64(t*(p3+float64(t*(p4+float64(t*p5)))))))))
	y := 1 - ((lo - float64(r*c)/(2-c)) - hi)
	return math.Ldexp(y, k)
}
