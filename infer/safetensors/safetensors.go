// Package safetensors reads and writes Hugging Face's safetensors files, the
// format DeepForest's hub models ship their weights in (model.safetensors),
// converting every floating-point tensor to float32.
//
// Layout: an 8-byte little-endian u64 header length N, then N bytes of JSON
//
//	{"NAME": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]},
//	 ..., "__metadata__": {"key": "value", ...}}
//
// (the JSON may be padded with trailing spaces), then the data section:
// each tensor's bytes, little-endian and C-contiguous, at [begin, end)
// counted from the start of the data section.
//
// Read accepts F32, F16 and BF16 tensors, converted exactly to float32; any
// other dtype is an error naming the tensor, except integer
// "*.num_batches_tracked" counters (torch BatchNorm2d state dicts carry
// them), which are skipped. Files are checked as strictly as the reference
// library does: the header's size, its JSON (no duplicate names), every
// tensor's offsets (in range, exactly prod(shape)·dtype size bytes, no
// overlap, no gap, the data section fully used). Every error starts with
// "safetensors: " and the file name; errors about the content wrap
// ErrFormat.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
)

// Tensor is one tensor converted to float32, in C order. DType is the dtype
// it was stored in ("F32", "F16" or "BF16").
type Tensor struct {
	Shape []int
	Data  []float32
	DType string
}

// Meta is the header's optional "__metadata__" map.
type Meta map[string]string

// ErrFormat is wrapped by every error about a file's content (as opposed to
// failing to read or write it).
var ErrFormat = errors.New("invalid safetensors file")

// MaxHeader is the largest header length accepted (the reference library's
// limit).
const MaxHeader = 100_000_000

// dtypeSize is the byte size of every dtype of the format's specification.
var dtypeSize = map[string]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8, "C64": 8,
}

var integer = map[string]bool{"BOOL": true, "U8": true, "I8": true, "I16": true, "U16": true, "I32": true, "U32": true, "I64": true, "U64": true}

type formatError struct{ msg string }

func (e *formatError) Error() string { return e.msg }
func (e *formatError) Unwrap() error { return ErrFormat }

func bad(format string, a ...any) error { return &formatError{fmt.Sprintf(format, a...)} }

func wrap(name string, err error) error {
	if name == "" {
		return fmt.Errorf("safetensors: %w", err)
	}
	return fmt.Errorf("safetensors: %s: %w", name, err)
}

// Read reads and converts the file at path. Its memory cost is the file's
// bytes plus the float32 tensors.
func Read(path string) (map[string]Tensor, Meta, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, wrap("", err) // *PathError already names the file
	}
	return Parse(path, b)
}

// Decode converts a whole file held in b.
func Decode(b []byte) (map[string]Tensor, Meta, error) { return Parse("", b) }

// Parse is Decode with the file's name for the error messages.
func Parse(name string, b []byte) (map[string]Tensor, Meta, error) {
	t, m, err := parse(b)
	if err != nil {
		return nil, nil, wrap(name, err)
	}
	return t, m, nil
}

type entry struct {
	name  string
	dtype string
	shape []int
	begin uint64
	end   uint64
}

type rawEntry struct {
	DType   *string   `json:"dtype"`
	Shape   *[]int    `json:"shape"`
	Offsets *[]uint64 `json:"data_offsets"`
}

func parse(b []byte) (map[string]Tensor, Meta, error) {
	if len(b) < 8 {
		return nil, nil, bad("file of %d bytes is too short for the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > MaxHeader {
		return nil, nil, bad("header length %d is over the %d-byte limit (not a safetensors file?)", n, MaxHeader)
	}
	if n > uint64(len(b)-8) {
		return nil, nil, bad("header length %d runs past the end of the file (%d bytes after the length)", n, len(b)-8)
	}
	hdr := b[8 : 8+n]
	data := b[8+n:]
	entries, meta, err := parseHeader(hdr)
	if err != nil {
		return nil, nil, err
	}
	// Offsets: each in range, of exactly the right size; sorted by begin,
	// they tile the data section without overlap or gap.
	for i := range entries {
		e := &entries[i]
		size, ok := dtypeSize[e.dtype]
		if !ok {
			return nil, nil, bad("tensor %q: unknown dtype %q", e.name, e.dtype)
		}
		want := uint64(size)
		zero := false
		for _, d := range e.shape {
			if d < 0 {
				return nil, nil, bad("tensor %q: negative dimension in shape %v", e.name, e.shape)
			}
			zero = zero || d == 0
		}
		for _, d := range e.shape {
			if zero {
				want = 0
				break
			}
			if want > math.MaxUint64/uint64(d) {
				want = math.MaxUint64 // more than any file holds
				break
			}
			want *= uint64(d)
		}
		if e.begin > e.end || e.end > uint64(len(data)) {
			return nil, nil, bad("tensor %q: data_offsets [%d, %d] out of range: the data section has %d bytes", e.name, e.begin, e.end, len(data))
		}
		if e.end-e.begin != want {
			return nil, nil, bad("tensor %q: data_offsets [%d, %d] hold %d bytes, but %s %v needs %s", e.name, e.begin, e.end, e.end-e.begin, e.dtype, e.shape, bytesString(want))
		}
	}
	order := make([]*entry, len(entries))
	for i := range entries {
		order[i] = &entries[i]
	}
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].begin != order[j].begin {
			return order[i].begin < order[j].begin
		}
		return order[i].end < order[j].end
	})
	var pos uint64
	var prev string
	for _, e := range order {
		if e.begin < pos {
			return nil, nil, bad("tensors %q and %q overlap (data_offsets [%d, %d] begin before %d)", prev, e.name, e.begin, e.end, pos)
		}
		if e.begin > pos {
			return nil, nil, bad("%d unused bytes in the data section before tensor %q (data_offsets [%d, %d])", e.begin-pos, e.name, e.begin, e.end)
		}
		pos, prev = e.end, e.name
	}
	if pos != uint64(len(data)) {
		return nil, nil, bad("the tensors use %d bytes of the %d-byte data section", pos, len(data))
	}
	// Dtypes, then conversion.
	out := make(map[string]Tensor, len(entries))
	for i := range entries {
		e := &entries[i]
		switch e.dtype {
		case "F32", "F16", "BF16":
		default:
			if integer[e.dtype] && strings.HasSuffix(e.name, ".num_batches_tracked") {
				continue
			}
			return nil, nil, bad("tensor %q has dtype %s: only F32, F16 and BF16 tensors are read", e.name, e.dtype)
		}
		out[e.name] = Tensor{Shape: e.shape, Data: convert(e.dtype, data[e.begin:e.end]), DType: e.dtype}
	}
	return out, meta, nil
}

func bytesString(n uint64) string {
	if n == math.MaxUint64 {
		return "more bytes than the file has"
	}
	return fmt.Sprintf("%d bytes", n)
}

// parseHeader decodes the JSON header token by token, so that duplicate
// names (which encoding/json would silently merge) are caught.
func parseHeader(hdr []byte) ([]entry, Meta, error) {
	dec := json.NewDecoder(bytes.NewReader(hdr))
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, bad("header is not JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, bad("header is not a JSON object")
	}
	seen := map[string]bool{}
	var entries []entry
	var meta Meta
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, bad("header is not JSON: %v", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, nil, bad("header is not JSON: key %v", tok)
		}
		if seen[name] {
			return nil, nil, bad("duplicate name %q in the header", name)
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, bad("header is not JSON at %q: %v", name, err)
		}
		if name == "__metadata__" {
			if string(raw) == "null" {
				continue
			}
			if err := json.Unmarshal(raw, &meta); err != nil || meta == nil {
				return nil, nil, bad("__metadata__ is not an object of strings: %s", short(raw))
			}
			continue
		}
		var r rawEntry
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, nil, bad("tensor %q: bad header entry %s: %v", name, short(raw), err)
		}
		if r.DType == nil || r.Shape == nil || r.Offsets == nil {
			return nil, nil, bad("tensor %q: header entry %s lacks dtype, shape or data_offsets", name, short(raw))
		}
		if len(*r.Offsets) != 2 {
			return nil, nil, bad("tensor %q: data_offsets %v is not [begin, end]", name, *r.Offsets)
		}
		shape := *r.Shape
		if shape == nil {
			shape = []int{}
		}
		entries = append(entries, entry{name: name, dtype: *r.DType, shape: shape, begin: (*r.Offsets)[0], end: (*r.Offsets)[1]})
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, bad("header is not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, bad("header has data after its JSON object")
	}
	return entries, meta, nil
}

func short(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "..."
	}
	return string(b)
}

func convert(dtype string, b []byte) []float32 {
	switch dtype {
	case "F32":
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out
	case "F16":
		out := make([]float32, len(b)/2)
		for i := range out {
			out[i] = F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return out
	case "BF16":
		out := make([]float32, len(b)/2)
		for i := range out {
			out[i] = BF16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return out
	}
	panic("safetensors: convert " + dtype)
}

// F16ToF32 converts an IEEE 754 binary16 to float32 exactly (subnormals,
// infinities, NaN payloads included).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // inf, nan
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: man·2^-24, exact in float32.
		v := float32(man) * 0x1p-24
		return math.Float32frombits(sign | math.Float32bits(v))
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// F32ToF16 rounds a float32 to binary16, to nearest, ties to even; values
// past the largest half overflow to ±Inf; NaN stays NaN (quiet).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // the half's biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Half subnormal (or zero): the value in units of 2^-24 is
		// (man|1<<23)·2^(e-14). Below 2^-25 everything rounds to zero
		// (float32 subnormals included).
		if e < -10 {
			return sign
		}
		m := man | 0x800000
		shift := uint(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry into the exponent is right, up to 0x7c00 = Inf
	}
	return sign | uint16(h)
}

// BF16ToF32 converts a bfloat16 to float32 (exact: the upper 16 bits).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds a float32 to bfloat16, to nearest, ties to even; NaN
// stays NaN (quiet).
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7f800000 == 0x7f800000 && b&0x7fffff != 0 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Encode makes a file's bytes: the tensors sorted by name, stored in dtype
// ("F32", "F16" or "BF16", rounded to nearest even), with meta as
// "__metadata__" when not empty, and the header padded with spaces to a
// multiple of 8 bytes as the reference library does. Tensor.DType is
// ignored.
func Encode(tensors map[string]Tensor, dtype string, meta map[string]string) ([]byte, error) {
	b, err := encode(tensors, dtype, meta)
	if err != nil {
		return nil, wrap("", err)
	}
	return b, nil
}

// Write writes Encode's bytes to path.
func Write(path string, tensors map[string]Tensor, dtype string, meta map[string]string) error {
	b, err := encode(tensors, dtype, meta)
	if err != nil {
		return wrap(path, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return wrap("", err)
	}
	return nil
}

func encode(tensors map[string]Tensor, dtype string, meta map[string]string) ([]byte, error) {
	var size int
	switch dtype {
	case "F32":
		size = 4
	case "F16", "BF16":
		size = 2
	default:
		return nil, fmt.Errorf("cannot write dtype %q: only F32, F16 and BF16", dtype)
	}
	names := make([]string, 0, len(tensors))
	for k := range tensors {
		if k == "__metadata__" || k == "" {
			return nil, fmt.Errorf("invalid tensor name %q", k)
		}
		names = append(names, k)
	}
	sort.Strings(names)
	var hdr bytes.Buffer
	enc := json.NewEncoder(&hdr)
	enc.SetEscapeHTML(false)
	put := func(v any) {
		_ = enc.Encode(v) // strings, ints and string maps always encode
		hdr.Truncate(hdr.Len() - 1)
	}
	hdr.WriteByte('{')
	if len(meta) > 0 {
		put("__metadata__")
		hdr.WriteByte(':')
		put(meta) // encoding/json sorts map keys
	}
	var off int
	for i, k := range names {
		t := tensors[k]
		n := 1
		for _, d := range t.Shape {
			if d < 0 {
				return nil, fmt.Errorf("tensor %q: negative dimension in shape %v", k, t.Shape)
			}
			n *= d
		}
		if n != len(t.Data) {
			return nil, fmt.Errorf("tensor %q: shape %v needs %d values, has %d", k, t.Shape, n, len(t.Data))
		}
		if i > 0 || len(meta) > 0 {
			hdr.WriteByte(',')
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		put(k)
		fmt.Fprintf(&hdr, `:{"dtype":"%s","shape":`, dtype)
		put(shape)
		fmt.Fprintf(&hdr, `,"data_offsets":[%d,%d]}`, off, off+n*size)
		off += n * size
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	out := make([]byte, 8+hdr.Len()+off)
	binary.LittleEndian.PutUint64(out, uint64(hdr.Len()))
	copy(out[8:], hdr.Bytes())
	p := out[8+hdr.Len():]
	for _, k := range names {
		for _, v := range tensors[k].Data {
			switch dtype {
			case "F32":
				binary.LittleEndian.PutUint32(p, math.Float32bits(v))
			case "F16":
				binary.LittleEndian.PutUint16(p, F32ToF16(v))
			case "BF16":
				binary.LittleEndian.PutUint16(p, F32ToBF16(v))
			}
			p = p[size:]
		}
	}
	return out, nil
}
