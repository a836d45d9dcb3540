package torchfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
)

// TestPickleOpcodes: the unpickler's stack rules, its integers and its
// sets, one hand-made pickle each (the opcodes torch.save writes, and the
// misuses a hostile file could make of them). Written for the mutation
// survivors of issue 35.
func TestPickleOpcodes(t *testing.T) {
	p := func() *pk { return (&pk{}).op(0x80, 2) }
	big9 := new(big.Int).Lsh(big.NewInt(1), 64) // 2^64: 9 bytes
	for _, c := range []struct {
		name string
		pkl  []byte
		want string // the root as %v, or "error: <part>"
	}{
		{"POP on an empty stack", p().op('0', '.').Bytes(), "error: stack underflow"},
		{"POP under a MARK", p().op('N', '(', '0', '.').Bytes(), "error: stack underflow"},
		{"POP", p().op('N', 'K', 7, '0', '.').Bytes(), "<nil>"},
		{"POP_MARK without a MARK", p().op('1', '.').Bytes(), "error: no MARK"},
		{"POP_MARK", p().op('K', 1, '(', 'K', 2, 'K', 3, '1', '.').Bytes(), "1"},
		{"DUP on an empty stack", p().op('2', '.').Bytes(), "error: stack underflow"},
		{"DUP", p().op('K', 4, '2', 0x86, '.').Bytes(), "[4 4]"},
		{"DICT with an odd count", p().op('(', 'K', 1, 'K', 2, 'K', 3, 'd', '.').Bytes(), "error: DICT with an odd number"},
		{"DICT", p().op('(', 'K', 1, 'K', 2, 'K', 3, 'K', 4, 'd', '.').Bytes(), "dict[1:2 3:4]"},
		{"DICT with a list key", p().op('(', ']', 'K', 2, 'd', '.').Bytes(), "error: "},
		{"SETITEMS with an odd count", p().op('}', '(', 'K', 1, 'u', '.').Bytes(), "error: SETITEMS with an odd number"},
		{"APPEND on an empty stack", p().op('a', '.').Bytes(), "error: stack underflow"},
		{"APPEND to an int", p().op('K', 1, 'K', 2, 'a', '.').Bytes(), "error: APPEND to int"},
		{"APPEND", p().op(']', 'K', 5, 'a', '.').Bytes(), "list[5]"},
		{"BINPUT on an empty stack", p().op('q', 0, '.').Bytes(), "error: stack underflow"},
		{"BINPUT cut short", p().op('N', 'q').Bytes(), "error: truncated pickle"},
		{"LONG_BINPUT cut short", p().op('N', 'r', 0, 0).Bytes(), "error: truncated pickle"},
		{"BINGET cut short", p().op('h').Bytes(), "error: truncated pickle"},
		{"LONG_BINGET cut short", p().op('j', 1).Bytes(), "error: truncated pickle"},
		{"BINGET of nothing stored", p().op('h', 3, '.').Bytes(), "error: memo entry 3 was never stored"},
		{"LONG_BINPUT and LONG_BINGET", p().op('K', 9, 'r', 7, 1, 0, 0, '0', 'j', 7, 1, 0, 0, '.').Bytes(), "9"},
		{"BININT2", p().op('M', 0x34, 0x12, '.').Bytes(), "4660"},
		{"BININT2 cut short", p().op('M', 1).Bytes(), "error: truncated pickle"},
		{"BININT cut short", p().op('J', 1, 2).Bytes(), "error: truncated pickle"},
		{"BININT -2", p().op('J', 0xfe, 0xff, 0xff, 0xff, '.').Bytes(), "-2"},
		{"LONG1 of nothing", p().op(0x8a, 0, '.').Bytes(), "0"},
		{"LONG1 -1", p().op(0x8a, 1, 0xff, '.').Bytes(), "-1"},
		{"LONG1 32767", p().op(0x8a, 2, 0xff, 0x7f, '.').Bytes(), "32767"},
		{"LONG1 -32768", p().op(0x8a, 2, 0x00, 0x80, '.').Bytes(), "-32768"},
		{"LONG1 2^63-1", p().op(0x8a, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '.').Bytes(), "9223372036854775807"},
		{"LONG1 2^64", p().op(0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1, '.').Bytes(), big9.String()},
		{"LONG1 -2^64", p().op(0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, '.').Bytes(), new(big.Int).Neg(big9).String()},
		{"LONG4 -2", p().op(0x8b, 1, 0, 0, 0, 0xfe, '.').Bytes(), "-2"},
		{"LONG1 cut short", p().op(0x8a).Bytes(), "error: truncated pickle"},
		{"LONG4 cut short", p().op(0x8b, 9, 0, 0, 0, 1).Bytes(), "error: truncated pickle"},
		{"empty set", p().glob("builtins", "set").op(')', 'R', '.').Bytes(), "list[]"},
		{"set of a list", p().glob("builtins", "set").op(']', 'K', 6, 'a', 0x85, 'R', '.').Bytes(), "list[6]"},
		{"set of an int", p().glob("builtins", "set").op('K', 6, 0x85, 'R', '.').Bytes(), "error: builtins.set of 1 arguments"},
		{"set of a list and an int", p().glob("builtins", "set").op(']', 'K', 6, 0x86, 'R', '.').Bytes(), "error: builtins.set of 2 arguments"},
		{"REDUCE with a global", p().glob("builtins", "set").glob("builtins", "set").op('R', '.').Bytes(), "error: with global builtins.set, want a tuple"},
		{"REDUCE with a dtype", p().glob("builtins", "set").glob("torch", "float32").op('R', '.').Bytes(), "error: with dtype float32, want a tuple"},
	} {
		f, _, err := ReadPickle("p.pkl", c.pkl)
		got := ""
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Errorf("%s: %v without ErrFormat", c.name, err)
			}
			got = "error: " + err.Error()
		} else {
			got = show(f.Root)
		}
		if w, isErr := strings.CutPrefix(c.want, "error: "); isErr {
			if err == nil || !strings.Contains(got, w) {
				t.Errorf("%s: %s, want an error with %q", c.name, got, w)
			}
		} else if got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// show is a value for the table above.
func show(v any) string {
	switch v := v.(type) {
	case *Dict:
		var parts []string
		for i, k := range v.Keys {
			parts = append(parts, fmt.Sprintf("%v:%v", show(k), show(v.Values[i])))
		}
		return "dict[" + strings.Join(parts, " ") + "]"
	case *List:
		var parts []string
		for _, x := range v.Items {
			parts = append(parts, show(x))
		}
		return "list[" + strings.Join(parts, " ") + "]"
	case Tuple:
		var parts []string
		for _, x := range v {
			parts = append(parts, show(x))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprint(v)
}

// TestReadPickleStorages: ReadPickle lists a pickle's storages once each,
// in the order it names them, without their data; TorchScript archives
// and tensor metadata that is not a dict are refused.
func TestReadPickleStorages(t *testing.T) {
	p := (&pk{}).op(0x80, 2, '(')
	for _, key := range []string{"0", "1", "0"} {
		p.op('(').str("storage").glob("torch", "FloatStorage").str(key).str("cpu").int(4).op('t', 'Q')
	}
	p.op('t', '.')
	f, list, err := ReadPickle("s.pkl", p.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	root := f.Root.(Tuple)
	if len(list) != 2 || list[0] != root[0] || list[1] != root[1] || root[2] != root[0] {
		t.Fatalf("storages %v of %v", list, root)
	}
	if _, _, err := ReadPickle("s.pkl", []byte{0x80, 2, '0', '.'}); err == nil || !strings.Contains(err.Error(), "s.pkl") {
		t.Errorf("a bad pickle: %v", err)
	}
	ts := archive(t, []byte{0x80, 2, 'N', '.'}, map[string][]byte{"constants.pkl": {0x80, 2, ')', '.'}})
	ts = []byte(strings.ReplaceAll(string(ts), "a/data.pkl", "a/code.pkl")) // both of the entry's headers
	if _, err := readBytes(ts); err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "a TorchScript archive") {
		t.Errorf("TorchScript: %v", err)
	}
	// _rebuild_tensor_v2's seventh argument, metadata, must be a dict or None.
	meta := tensorPickle(6, 0, []int32{2, 3}, []int32{3, 1})
	meta = replaceOnce(meta, "\x89ccollections\nOrderedDict\n)R", "\x89ccollections\nOrderedDict\n)RK\x01")
	if _, err := readBytes(archive(t, meta, map[string][]byte{"data/0": make([]byte, 24)})); err == nil || !strings.Contains(err.Error(), "metadata int, want a dict") {
		t.Errorf("metadata: %v", err)
	}
	for d := DType(0); d <= Bool+1; d++ {
		if s := d.String(); (d == 0 || d > Bool) != strings.HasPrefix(s, "dtype(") {
			t.Errorf("DType(%d) is %q", d, s)
		}
	}
}

// TestFloat64Storage: a DoubleStorage tensor converts to float32 element
// by element (each value rounded once).
func TestFloat64Storage(t *testing.T) {
	pkl := replaceOnce(tensorPickle(3, 0, []int32{3}, []int32{1}), "FloatStorage", "DoubleStorage")
	data := make([]byte, 24)
	for i, v := range []float64{1.5, -2.25, 0.1} {
		binary.LittleEndian.PutUint64(data[8*i:], math.Float64bits(v))
	}
	f, err := readBytes(archive(t, pkl, map[string][]byte{"data/0": data}))
	if err != nil {
		t.Fatal(err)
	}
	w := f.Root.(*Dict).Values[0].(*Tensor)
	got, err := f.Float32(w)
	if err != nil || len(got) != 3 || got[0] != 1.5 || got[1] != -2.25 || got[2] != float32(0.1) || w.DType != Float64 {
		t.Fatalf("%v %v (%v)", got, err, w.DType)
	}
}

func replaceOnce(b []byte, old, new string) []byte {
	return []byte(strings.Replace(string(b), old, new, 1))
}
