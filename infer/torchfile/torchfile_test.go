package torchfile

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

type expTensor struct {
	Shape []int    `json:"shape"`
	DType string   `json:"dtype"`
	Bits  []uint32 `json:"bits"`
}

func loadExpected(t *testing.T) map[string]map[string]expTensor {
	t.Helper()
	b, err := os.ReadFile("testdata/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]expTensor{}
	for k, v := range raw {
		if k == "torch" {
			continue
		}
		var m map[string]expTensor
		if err := json.Unmarshal(v, &m); err != nil {
			t.Fatal(err)
		}
		out[k] = m
	}
	return out
}

// tensors flattens a loaded file's float tensors as make.py's walk does.
func tensors(t *testing.T, f *File) map[string]*Tensor {
	t.Helper()
	out := map[string]*Tensor{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case *Tensor:
			if v.DType.Float() {
				out[prefix] = v
			}
		case *Dict:
			for i, k := range v.Keys {
				ks, ok := k.(string)
				if !ok {
					continue
				}
				if prefix != "" {
					ks = prefix + "." + ks
				}
				walk(ks, v.Values[i])
			}
		}
	}
	walk("", f.Root)
	return out
}

// TestTorchFixtures: every float tensor of the files torch wrote reads back
// with torch's shape and float32 bits (f16 and bf16 converted exactly).
func TestTorchFixtures(t *testing.T) {
	exp := loadExpected(t)
	names := make([]string, 0, len(exp))
	for k := range exp {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "overlap.pt" || name == "noncontig.pt" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			f, err := Open(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got := tensors(t, f)
			if len(got) != len(exp[name]) || len(got) == 0 {
				t.Fatalf("%d float tensors, torch has %d", len(got), len(exp[name]))
			}
			for k, e := range exp[name] {
				tn, ok := got[k]
				if !ok {
					t.Fatalf("tensor %s missing", k)
				}
				if tn.DType.String() != e.DType || len(tn.Shape) != len(e.Shape) {
					t.Fatalf("%s: %s %v, torch %s %v", k, tn.DType, tn.Shape, e.DType, e.Shape)
				}
				for i := range e.Shape {
					if tn.Shape[i] != e.Shape[i] {
						t.Fatalf("%s: shape %v, torch %v", k, tn.Shape, e.Shape)
					}
				}
				v, err := f.Float32(tn)
				if err != nil {
					t.Fatalf("%s: %v", k, err)
				}
				if len(v) != len(e.Bits) {
					t.Fatalf("%s: %d values, torch %d", k, len(v), len(e.Bits))
				}
				for i := range v {
					if math.Float32bits(v[i]) != e.Bits[i] {
						t.Fatalf("%s[%d]: %#x, torch %#x", k, i, math.Float32bits(v[i]), e.Bits[i])
					}
				}
			}
		})
	}
}

// TestStateDict: the OrderedDict comes back ordered, with the int64
// counter as a tensor that Float32 refuses.
func TestStateDict(t *testing.T) {
	f, err := Open("testdata/state_f32.pt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, ok := f.Root.(*Dict)
	if !ok || !d.Ordered {
		t.Fatalf("root is %s, want an OrderedDict", typeName(f.Root))
	}
	want := []any{"conv.weight", "conv.bias", "bn.running_var", "bn.num_batches_tracked", "scalar", "special", "rank3", "empty"}
	if len(d.Keys) != len(want) {
		t.Fatalf("keys %v", d.Keys)
	}
	for i := range want {
		if d.Keys[i] != want[i] {
			t.Fatalf("keys %v, want %v", d.Keys, want)
		}
	}
	v, _ := d.Get("bn.num_batches_tracked")
	nb := v.(*Tensor)
	if nb.DType != Int64 || len(nb.Shape) != 0 {
		t.Fatalf("num_batches_tracked: %s %v", nb.DType, nb.Shape)
	}
	if _, err := f.Float32(nb); err == nil || !errors.Is(err, ErrFormat) {
		t.Fatalf("Float32 of an int64 tensor: %v", err)
	}
	if f.Version < 1 || f.Archive != "state_f32" {
		t.Fatalf("version %d, archive %q", f.Version, f.Archive)
	}
}

// TestPlainValues: a Lightning-like checkpoint's plain values.
func TestPlainValues(t *testing.T) {
	f, err := Open("testdata/hparams.pt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root := f.Root.(*Dict)
	hp, _ := root.Get("hyper_parameters")
	cfgv, _ := hp.(*Dict).Get("config")
	cfg := cfgv.(*Dict)
	get := func(k string) any {
		v, ok := cfg.Get(k)
		if !ok {
			t.Fatalf("no %s", k)
		}
		return v
	}
	if get("score_thresh") != 0.3 || get("num_classes") != int64(2) || get("flag") != true || get("neg") != int64(-5) {
		t.Fatalf("scalars: %v %v %v %v", get("score_thresh"), get("num_classes"), get("flag"), get("neg"))
	}
	if b, ok := get("big").(*big.Int); !ok || b.Cmp(new(big.Int).Lsh(big.NewInt(1), 70)) != 0 {
		t.Fatalf("big: %v", get("big"))
	}
	ld := get("label_dict").(*Dict)
	if v, _ := ld.Get("Bird"); v != int64(1) {
		t.Fatalf("label_dict: %v", ld.Keys)
	}
	m := get("model").(*Dict)
	if v, ok := m.Get("name"); !ok || v != nil {
		t.Fatalf("model.name: %v %v", v, ok)
	}
	if l := get("resize").(*List); len(l.Items) != 2 || l.Items[1] != int64(224) {
		t.Fatalf("resize: %v", l.Items)
	}
	if tp := get("t").(Tuple); len(tp) != 2 || tp[1] != "a" {
		t.Fatalf("t: %v", tp)
	}
	n2l, _ := root.Get("numeric_to_label_dict")
	if v, _ := n2l.(*Dict).Get(int64(1)); v != "Bird" {
		t.Fatalf("numeric_to_label_dict: %v", n2l.(*Dict).Keys)
	}
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	if !errors.Is(err, ErrFormat) {
		t.Fatalf("error without ErrFormat: %v", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}

// TestRefusals: the torch-written files canopy refuses, and why.
func TestRefusals(t *testing.T) {
	_, err := Open("testdata/forbidden.pt")
	wantErr(t, err, "argparse.Namespace", "forbidden.pt")
	var fg *ForbiddenGlobalError
	if !errors.As(err, &fg) || fg.Name != "argparse.Namespace" {
		t.Fatalf("not a ForbiddenGlobalError naming argparse.Namespace: %v", err)
	}
	_, err = Open("testdata/noncontig.pt")
	wantErr(t, err, "not contiguous")
	_, err = Open("testdata/legacy.pt")
	wantErr(t, err, "not a torch.save zip archive")

	f, err := Open("testdata/overlap.pt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ts := tensors(t, f)
	if _, err := f.Float32(ts["x"]); err != nil {
		t.Fatal(err)
	}
	_, err = f.Float32(ts["y"])
	wantErr(t, err, "overlap")
}

// TestTruncated: every prefix of a real file is refused with ErrFormat, never
// a panic.
func TestTruncated(t *testing.T) {
	b, err := os.ReadFile("testdata/state_bf16.pt")
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(b); n += 7 {
		f, err := Read("cut.pt", bytes.NewReader(b[:n]), int64(n))
		if err == nil {
			// a cut inside the trailing serialization_id could leave the
			// directory readable only if it was not cut: impossible here
			t.Fatalf("prefix of %d bytes accepted: %v", n, f.Root)
		}
		wantErr(t, err, "cut.pt")
	}
}

// pk builds pickles by hand.
type pk struct{ bytes.Buffer }

func (p *pk) op(b ...byte) *pk { p.Write(b); return p }
func (p *pk) str(s string) *pk {
	p.WriteByte('X')
	binary.Write(&p.Buffer, binary.LittleEndian, uint32(len(s)))
	p.WriteString(s)
	return p
}
func (p *pk) glob(m, n string) *pk { p.WriteString("c" + m + "\n" + n + "\n"); return p }
func (p *pk) int(v int32) *pk {
	p.WriteByte('J')
	binary.Write(&p.Buffer, binary.LittleEndian, v)
	return p
}

// tensorPickle: {"w": _rebuild_tensor_v2(storage(key "0", numel), off, size, stride, False, OrderedDict())}
func tensorPickle(numel, off int32, size, stride []int32) []byte {
	p := &pk{}
	p.op(0x80, 2, '}', '(').str("w").glob("torch._utils", "_rebuild_tensor_v2").op('(')
	p.op('(').str("storage").glob("torch", "FloatStorage").str("0").str("cpu").int(numel).op('t', 'Q')
	p.int(off).op('(')
	for _, s := range size {
		p.int(s)
	}
	p.op('t', '(')
	for _, s := range stride {
		p.int(s)
	}
	p.op('t', 0x89).glob("collections", "OrderedDict").op(')', 'R', 't', 'R', 'u', '.')
	return p.Bytes()
}

func archive(t testing.TB, pkl []byte, entries map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	put := func(name string, b []byte) {
		fw, err := w.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(b)
	}
	put("a/data.pkl", pkl)
	put("a/version", []byte("3\n"))
	put("a/byteorder", []byte("little"))
	keys := make([]string, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		put("a/"+k, entries[k])
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readBytes(b []byte) (*File, error) { return Read("h.pt", bytes.NewReader(b), int64(len(b))) }

// TestHostile: hand-made archives that must be refused before any
// allocation of the claimed size.
func TestHostile(t *testing.T) {
	data := make([]byte, 24) // 6 float32
	ok := archive(t, tensorPickle(6, 0, []int32{2, 3}, []int32{3, 1}), map[string][]byte{"data/0": data})
	f, err := readBytes(ok)
	if err != nil {
		t.Fatalf("the well-formed control is refused: %v", err)
	}
	if v, err := f.Float32(tensors(t, f)["w"]); err != nil || len(v) != 6 {
		t.Fatalf("control: %v, %d values", err, len(v))
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"storage larger than its entry", archive(t, tensorPickle(1<<30, 0, []int32{2, 3}, []int32{3, 1}), map[string][]byte{"data/0": data}), "claims 1073741824 float32 elements"},
		{"storage smaller than its entry", archive(t, tensorPickle(5, 0, []int32{5}, []int32{1}), map[string][]byte{"data/0": data}), "entry holds 24 bytes"},
		{"missing storage entry", archive(t, tensorPickle(6, 0, []int32{6}, []int32{1}), nil), "has no entry"},
		{"shape larger than storage", archive(t, tensorPickle(6, 0, []int32{7}, []int32{1}), map[string][]byte{"data/0": data}), "more elements than its storage"},
		{"offset past the end", archive(t, tensorPickle(6, 2, []int32{5}, []int32{1}), map[string][]byte{"data/0": data}), "run past storage"},
		{"negative dimension", archive(t, tensorPickle(6, 0, []int32{-1}, []int32{1}), map[string][]byte{"data/0": data}), "dimension 0"},
		{"strided", archive(t, tensorPickle(6, 0, []int32{3}, []int32{2}), map[string][]byte{"data/0": data}), "not contiguous"},
		{"huge string length", archive(t, []byte("\x80\x02X\xff\xff\xff\x7f"), nil), "truncated pickle"},
		{"huge BINBYTES8", archive(t, []byte("\x80\x04\x8e\xff\xff\xff\xff\xff\xff\xff\x7f"), nil), "truncated pickle"},
		{"no STOP", archive(t, []byte("\x80\x02}"), nil), "without STOP"},
		{"os.system", archive(t, (&pk{}).op(0x80, 2).glob("os", "system").str("true").op(0x85, 'R', '.').Bytes(), nil), "os.system"},
		{"builtins.eval via STACK_GLOBAL", archive(t, (&pk{}).op(0x80, 4).str("builtins").str("eval").op(0x93, '.').Bytes(), nil), "builtins.eval"},
		{"REDUCE of a storage class", archive(t, (&pk{}).op(0x80, 2).glob("torch", "FloatStorage").op(')', 'R', '.').Bytes(), nil), "only a persistent id"},
		{"BUILD on a dict", archive(t, []byte("\x80\x02}}b."), nil), "BUILD on dict"},
		{"INST opcode", archive(t, []byte("\x80\x02(ios\nsystem\n."), nil), "not admitted"},
		{"memo miss", archive(t, []byte("\x80\x02h\x05."), nil), "never stored"},
		{"underflow", archive(t, []byte("\x80\x02R."), nil), "underflow"},
		{"list key", archive(t, []byte("\x80\x02}]Ns."), nil), "dict key of type list"},
		{"compressed entry", func() []byte {
			var buf bytes.Buffer
			w := zip.NewWriter(&buf)
			fw, _ := w.Create("a/data.pkl")
			fw.Write([]byte("\x80\x02N."))
			w.Close()
			return buf.Bytes()
		}(), "compressed"},
		{"big-endian", func() []byte {
			var buf bytes.Buffer
			w := zip.NewWriter(&buf)
			for _, e := range [][2]string{{"a/data.pkl", "\x80\x02N."}, {"a/version", "3"}, {"a/byteorder", "big"}} {
				fw, _ := w.CreateHeader(&zip.FileHeader{Name: e[0], Method: zip.Store})
				fw.Write([]byte(e[1]))
			}
			w.Close()
			return buf.Bytes()
		}(), "byteorder"},
		{"not a zip", []byte("PK\x03\x04 garbage"), "not a torch.save zip"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := readBytes(c.b)
			wantErr(t, err, c.want)
		})
	}
}

// TestZipDirectoryPastEnd (found by FuzzRead, issue 35): a zip whose
// central directory runs past the file's end made archive/zip return a
// bare io.EOF, which came out as "f.pt: EOF" without ErrFormat; it is a
// format error naming what the file is not.
func TestZipDirectoryPastEnd(t *testing.T) {
	b, err := os.ReadFile("testdata/eof_directory.pt")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Read("eof.pt", bytes.NewReader(b), int64(len(b)))
	if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "eof.pt: not a torch.save zip archive") {
		t.Fatalf("%v, want an ErrFormat naming the file", err)
	}
}
