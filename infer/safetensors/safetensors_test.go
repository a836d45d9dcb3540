package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func bits(f float32) uint32 { return math.Float32bits(f) }

// sameBits compares float32 values bit for bit, any NaN matching any NaN.
func sameBits(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return bits(a) == bits(b)
}

func TestF16Conversion(t *testing.T) {
	// Hand-computed: binary16 has 10 mantissa bits, exponent bias 15,
	// largest finite (2-2^-10)·2^15 = 65504, smallest subnormal 2^-24.
	cases := []struct {
		in   float32
		h    uint16
		back float32
	}{
		{1, 0x3c00, 1},
		{-2, 0xc000, -2},
		// 1+2^-11 lies exactly halfway between 1 (mantissa 0, even) and
		// 1+2^-10 (mantissa 1): ties to even gives 1.
		{1 + 0x1p-11, 0x3c00, 1},
		// 1+3·2^-11 lies halfway between 1+2^-10 (mantissa 1) and 1+2^-9
		// (mantissa 2, even): rounds up to 1+2^-9.
		{1 + 3*0x1p-11, 0x3c02, 1 + 0x1p-9},
		// Just above the tie: 1+2^-11+2^-23 rounds up to 1+2^-10.
		{1 + 0x1p-11 + 0x1p-23, 0x3c01, 1 + 0x1p-10},
		{65504, 0x7bff, 65504},
		// 65519 is below the midpoint 65520 of 65504 and 2^16: down.
		{65519, 0x7bff, 65504},
		// 65520 is the midpoint; 65504 has the odd mantissa 0x3ff, so the
		// tie goes up to 2^16, which overflows to +Inf.
		{65520, 0x7c00, float32(math.Inf(1))},
		{-1e6, 0xfc00, float32(math.Inf(-1))},
		// 2^-14: the smallest normal, exponent field 1.
		{0x1p-14, 0x0400, 0x1p-14},
		// Subnormals count units of 2^-24.
		{0x1p-24, 0x0001, 0x1p-24},
		{5 * 0x1p-24, 0x0005, 5 * 0x1p-24},
		// 2^-25 is halfway between 0 and 2^-24: ties to even gives 0.
		{0x1p-25, 0x0000, 0},
		// 3·2^-26 = 0.75·2^-24: above the midpoint, up to 2^-24.
		{3 * 0x1p-26, 0x0001, 0x1p-24},
		// 3·2^-25 = 1.5 units: tie between 1 and 2 units, to even: 2.
		{3 * 0x1p-25, 0x0002, 2 * 0x1p-24},
		// (2^10-0.5)·2^-24 is halfway between the largest subnormal
		// 0x3ff and the smallest normal 0x400 (even): carries into the
		// exponent field.
		{(1024 - 0.5) * 0x1p-24, 0x0400, 0x1p-14},
		{float32(math.Copysign(0, -1)), 0x8000, float32(math.Copysign(0, -1))},
		{1e-40, 0x0000, 0}, // a float32 subnormal
		{float32(math.Inf(1)), 0x7c00, float32(math.Inf(1))},
	}
	for _, c := range cases {
		h := F32ToF16(c.in)
		if h != c.h {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", c.in, h, c.h)
		}
		if got := F16ToF32(h); !sameBits(got, c.back) {
			t.Errorf("F16ToF32(%#04x) = %g, want %g", h, got, c.back)
		}
	}
	if h := F32ToF16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("NaN -> %#04x", h)
	}
	if f := F16ToF32(0x7e01); !math.IsNaN(float64(f)) || bits(f) != 0x7fc02000 {
		t.Errorf("F16ToF32(0x7e01) = %#08x, want the NaN 0x7fc02000", bits(f))
	}
	// Every half survives F16 -> F32 -> F16 (NaN payloads included).
	for h := 0; h < 1<<16; h++ {
		if back := F32ToF16(F16ToF32(uint16(h))); back != uint16(h) && !(h&0x7c00 == 0x7c00 && h&0x3ff != 0 && back&0x3ff != 0) {
			t.Fatalf("half %#04x -> %g -> %#04x", h, F16ToF32(uint16(h)), back)
		}
	}
}

func TestBF16Conversion(t *testing.T) {
	// Hand-computed: bfloat16 is float32's upper 16 bits (7 mantissa
	// bits); rounding looks at the lower 16.
	cases := []struct {
		in   float32
		h    uint16
		back float32
	}{
		{1, 0x3f80, 1},
		// 1.00390625 = 1+2^-8: the lower half 0x8000 is exactly half an
		// ulp (2^-7); 0x3f80 is even, so it stays 1.
		{1.00390625, 0x3f80, 1},
		// 1.01171875 = 1+3·2^-8: tie between 0x3f81 (odd) and 0x3f82:
		// goes to 0x3f82 = 1+2^-6 = 1.015625.
		{1.01171875, 0x3f82, 1.015625},
		// 1+2^-8+2^-23: above the tie, up to 1+2^-7.
		{1 + 0x1p-8 + 0x1p-23, 0x3f81, 1 + 0x1p-7},
		// π = 0x40490fdb: lower half 0x0fdb < 0x8000, truncates to 3.140625.
		{math.Pi, 0x4049, 3.140625},
		// 65520 = 0x477ff000 rounds up to 65536 = 0x47800000.
		{65520, 0x4780, 65536},
		// float32 max 0x7f7fffff is above bf16 max + half ulp: +Inf.
		{math.MaxFloat32, 0x7f80, float32(math.Inf(1))},
		// -2^-130 = -2^19·2^-149, a float32 subnormal with bits 0x80080000: exact.
		{-0x1p-130, 0x8008, -0x1p-130},
		{float32(math.Inf(-1)), 0xff80, float32(math.Inf(-1))},
	}
	for _, c := range cases {
		h := F32ToBF16(c.in)
		if h != c.h {
			t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", c.in, h, c.h)
		}
		if got := BF16ToF32(h); !sameBits(got, c.back) {
			t.Errorf("BF16ToF32(%#04x) = %g, want %g", h, got, c.back)
		}
	}
	if h := F32ToBF16(math.Float32frombits(0x7f800001)); h&0x7f80 != 0x7f80 || h&0x7f == 0 {
		t.Errorf("signalling NaN with a low payload -> %#04x, not a NaN", h)
	}
}

func sample() map[string]Tensor {
	return map[string]Tensor{
		"b.weight":   {Shape: []int{2, 3}, Data: []float32{1, -2, 1 + 0x1p-11, 65520, 0x1p-25, 1.01171875}},
		"a.bias":     {Shape: []int{3}, Data: []float32{0.5, 1e-3, -7}},
		"scalar":     {Shape: []int{}, Data: []float32{3.25}},
		"empty.zero": {Shape: []int{0, 4}, Data: nil},
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	in := sample()
	meta := map[string]string{"format": "pt", "note": "<&>"}
	for _, dt := range []string{"F32", "F16", "BF16"} {
		p := filepath.Join(dir, dt+".safetensors")
		if err := Write(p, in, dt, meta); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(p)
		n := binary.LittleEndian.Uint64(raw)
		if n%8 != 0 {
			t.Errorf("%s: header length %d not a multiple of 8", dt, n)
		}
		if !strings.HasPrefix(string(raw[8:]), `{"__metadata__":{"format":"pt","note":"<&>"},"a.bias":{"dtype":"`+dt+`","shape":[3],"data_offsets":[0,`) {
			t.Errorf("%s: header %q", dt, raw[8:8+n])
		}
		got, m, err := Read(p)
		if err != nil {
			t.Fatal(err)
		}
		if m["format"] != "pt" || m["note"] != "<&>" || len(m) != 2 {
			t.Errorf("%s: meta %v", dt, m)
		}
		if len(got) != len(in) {
			t.Fatalf("%s: %d tensors, want %d", dt, len(got), len(in))
		}
		for k, v := range in {
			g := got[k]
			if g.DType != dt || len(g.Shape) != len(v.Shape) || len(g.Data) != len(v.Data) {
				t.Fatalf("%s %s: got %+v", dt, k, g)
			}
			for i := range v.Shape {
				if g.Shape[i] != v.Shape[i] {
					t.Errorf("%s %s: shape %v", dt, k, g.Shape)
				}
			}
			for i, x := range v.Data {
				want := x
				switch dt {
				case "F16":
					want = F16ToF32(F32ToF16(x))
				case "BF16":
					want = BF16ToF32(F32ToBF16(x))
				}
				if !sameBits(g.Data[i], want) {
					t.Errorf("%s %s[%d] = %g, want %g", dt, k, i, g.Data[i], want)
				}
			}
		}
	}
	// Spot checks of the stored values, computed by hand above.
	f16, _, _ := Read(filepath.Join(dir, "F16.safetensors"))
	if w := f16["b.weight"].Data; w[2] != 1 || !math.IsInf(float64(w[3]), 1) || w[4] != 0 || w[5] != 1.01171875 {
		// 1.01171875 = 1+3·2^-8 is exact in F16 (10 mantissa bits).
		t.Errorf("F16 b.weight = %v", w)
	}
	bf, _, _ := Read(filepath.Join(dir, "BF16.safetensors"))
	if w := bf["b.weight"].Data; w[2] != 1 || w[3] != 65536 || w[4] != 0x1p-25 || w[5] != 1.015625 {
		t.Errorf("BF16 b.weight = %v", w)
	}
	if err := Write(filepath.Join(dir, "x"), in, "F64", nil); err == nil || !strings.HasPrefix(err.Error(), "safetensors: ") {
		t.Errorf("F64 write: %v", err)
	}
	bad := map[string]Tensor{"x": {Shape: []int{2, 2}, Data: []float32{1}}}
	if err := Write(filepath.Join(dir, "x"), bad, "F32", nil); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("short data: %v", err)
	}
}

// file assembles a safetensors file from a literal header and data.
func file(header string, data []byte) []byte {
	b := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func TestCorrupt(t *testing.T) {
	good, err := Encode(map[string]Tensor{"w": {Shape: []int{2}, Data: []float32{1, 2}}}, "F32", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Decode(good); err != nil {
		t.Fatal(err)
	}
	huge := make([]byte, 16)
	binary.LittleEndian.PutUint64(huge, 1<<40)
	past := make([]byte, 16)
	binary.LittleEndian.PutUint64(past, 9)
	d8 := make([]byte, 8)
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"short header length", []byte{1, 2, 3}, "too short"},
		{"huge header", huge, "over the"},
		{"header past the end", past, "runs past the end"},
		{"bad JSON", file(`{"w": {"dtype": "F32",`, d8), "not JSON"},
		{"not an object", file(`[1, 2]`, nil), "not a JSON object"},
		{"trailing JSON", file(`{} {}`, nil), "after its JSON"},
		{"missing field", file(`{"w":{"dtype":"F32","shape":[2]}}`, d8), "lacks"},
		{"bad offsets", file(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}}`, d8), "not [begin, end]"},
		{"negative dim", file(`{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, d8), "negative"},
		{"offsets out of range", file(`{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, d8), "out of range"},
		{"begin after end", file(`{"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, d8), "out of range"},
		{"wrong size", file(`{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, d8), "hold 8 bytes, but F32 [3] needs 12 bytes"},
		{"overflowing shape", file(`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, d8), "more bytes than the file has"},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, d8), "overlap"},
		{"gap", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, d8), "unused bytes"},
		{"trailing data", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, d8), "use 4 bytes of the 8-byte"},
		{"unknown dtype", file(`{"w":{"dtype":"F128","shape":[1],"data_offsets":[0,8]}}`, d8), `unknown dtype "F128"`},
		{"unsupported dtype", file(`{"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`, d8), `tensor "w" has dtype F64`},
		{"integer weight", file(`{"w.weight":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`, d8), `tensor "w.weight" has dtype I64`},
		{"duplicate", file(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, d8), `duplicate name "w"`},
		{"bad metadata", file(`{"__metadata__":{"a":1}}`, nil), "__metadata__"},
	}
	for _, c := range cases {
		_, _, err := Decode(c.b)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !strings.HasPrefix(err.Error(), "safetensors: ") || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrFormat) {
			t.Errorf("%s: error %q, want one containing %q and wrapping ErrFormat", c.name, err, c.want)
		}
	}
	// Read names the file.
	p := filepath.Join(t.TempDir(), "model.safetensors")
	os.WriteFile(p, []byte{1, 2, 3}, 0o644)
	if _, _, err := Read(p); err == nil || !strings.HasPrefix(err.Error(), "safetensors: "+p+": ") {
		t.Errorf("Read: %v", err)
	}
	if _, _, err := Read(p + ".absent"); err == nil || !strings.HasPrefix(err.Error(), "safetensors: ") || !strings.Contains(err.Error(), p+".absent") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read absent: %v", err)
	}
}

func TestSkipsNumBatchesTracked(t *testing.T) {
	data := make([]byte, 16)
	binary.LittleEndian.PutUint64(data, 12345)
	binary.LittleEndian.PutUint32(data[8:], math.Float32bits(1.5))
	binary.LittleEndian.PutUint32(data[12:], math.Float32bits(-3))
	h := `{"bn1.num_batches_tracked":{"dtype":"I64","shape":[],"data_offsets":[0,8]},"bn1.weight":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`
	got, _, err := Decode(file(h, data))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["bn1.weight"].Data[0] != 1.5 || got["bn1.weight"].Data[1] != -3 {
		t.Errorf("got %+v", got)
	}
}

// The fixtures were written by the Python safetensors library (make.py);
// expected.json has the float32 bits torch reads back from them.
func TestPythonFixtures(t *testing.T) {
	raw, err := os.ReadFile("testdata/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var exp map[string]map[string]struct {
		Shape []int
		Bits  []uint32
	}
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	files := map[string]map[string]Tensor{}
	for _, name := range []string{"f32", "f16", "bf16"} {
		got, meta, err := Read("testdata/small_" + name + ".safetensors")
		if err != nil {
			t.Fatal(err)
		}
		files[name] = got
		if meta["format"] != "pt" || meta["made_by"] != "make.py" {
			t.Errorf("%s: meta %v", name, meta)
		}
		if _, ok := got["bn.num_batches_tracked"]; ok {
			t.Errorf("%s: num_batches_tracked not skipped", name)
		}
		if len(got) != len(exp[name]) {
			t.Errorf("%s: %d tensors, expected.json has %d", name, len(got), len(exp[name]))
		}
		for k, e := range exp[name] {
			g, ok := got[k]
			if !ok {
				t.Errorf("%s: no tensor %s", name, k)
				continue
			}
			if g.DType != strings.ToUpper(name) || len(g.Shape) != len(e.Shape) || len(g.Data) != len(e.Bits) {
				t.Errorf("%s %s: dtype %s shape %v len %d, want %v len %d", name, k, g.DType, g.Shape, len(g.Data), e.Shape, len(e.Bits))
				continue
			}
			for i := range e.Shape {
				if g.Shape[i] != e.Shape[i] {
					t.Errorf("%s %s: shape %v, want %v", name, k, g.Shape, e.Shape)
				}
			}
			for i, b := range e.Bits {
				if !sameBits(g.Data[i], math.Float32frombits(b)) {
					t.Errorf("%s %s[%d] = %#08x, torch read %#08x", name, k, i, bits(g.Data[i]), b)
				}
			}
		}
	}
	// Go's rounding of the float32 values agrees with torch's.
	for k, v := range files["f32"] {
		for i, x := range v.Data {
			if h := F16ToF32(F32ToF16(x)); !sameBits(h, files["f16"][k].Data[i]) {
				t.Errorf("F16 %s[%d]: Go rounds %g to %g, torch to %g", k, i, x, h, files["f16"][k].Data[i])
			}
			if h := BF16ToF32(F32ToBF16(x)); !sameBits(h, files["bf16"][k].Data[i]) {
				t.Errorf("BF16 %s[%d]: Go rounds %g to %g, torch to %g", k, i, x, h, files["bf16"][k].Data[i])
			}
		}
	}
}
