package torchfile

import (
	"fmt"
	"math"
	"strings"
)

// What the networks' loaders (infer/retinanet's detector files,
// infer/crop's classifier files) read from a torch.save file the same
// way: a state dict's float tensors, a {label: id} dict, the name of a
// pickled value's kind.

// Floats is one state-dict tensor converted to float32, in C order.
type Floats struct {
	Shape []int
	Data  []float32
}

// StateDict converts a state dict's float tensors (float32, float64,
// float16, bfloat16; exactly, or rounded once for float64). Integer
// num_batches_tracked counters are skipped; any other non-tensor,
// non-float or non-string-keyed entry is an error naming it. dtypes
// counts the tensors by stored dtype.
func (f *File) StateDict(sd *Dict) (w map[string]Floats, dtypes map[string]int, err error) {
	w = make(map[string]Floats, sd.Len())
	dtypes = map[string]int{}
	for i, k := range sd.Keys {
		name, ok := k.(string)
		if !ok {
			return nil, nil, fmt.Errorf("%s: state dict key %v is not a string", f.Name, k)
		}
		t, ok := sd.Values[i].(*Tensor)
		if !ok {
			return nil, nil, fmt.Errorf("%s: state dict entry %q is a %s, want a tensor", f.Name, name, KindName(sd.Values[i]))
		}
		if strings.HasSuffix(name, ".num_batches_tracked") && !t.DType.Float() {
			continue
		}
		if !t.DType.Float() {
			return nil, nil, fmt.Errorf("%s: tensor %q has dtype %s, want float32, float16 or bfloat16", f.Name, name, t.DType)
		}
		data, err := f.Float32(t)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		w[name] = Floats{Shape: t.Shape, Data: data}
		dtypes[t.DType.String()]++
	}
	if len(w) == 0 {
		return nil, nil, fmt.Errorf("%s: the state dict holds no float tensors", f.Name)
	}
	return w, dtypes, nil
}

// LabelDict reads a {name: id} dict (what DeepForest stores as
// label_dict). Names are str; a numeric name (label_dict {0: 0}) is
// written as Python prints it. what names the value in errors.
func LabelDict(v any, what string) (map[string]int, error) {
	d, ok := v.(*Dict)
	if !ok {
		return nil, fmt.Errorf("%s is a %s, want a dict {label: id}", what, KindName(v))
	}
	out := make(map[string]int, d.Len())
	for i, k := range d.Keys {
		var name string
		switch x := k.(type) {
		case string:
			name = x
		case int64:
			name = fmt.Sprint(x)
		case float64:
			name = PyFloat(x)
		default:
			return nil, fmt.Errorf("%s: label %v is a %s, want a str", what, k, KindName(k))
		}
		id, ok := d.Values[i].(int64)
		if !ok || id < 0 || id > math.MaxInt32 {
			return nil, fmt.Errorf("%s: the id of %q is %v, want an int >= 0", what, name, d.Values[i])
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s: label %q appears twice", what, name)
		}
		out[name] = int(id)
	}
	return out, nil
}

// PyFloat is Python's repr of a float with an integral or short value
// (0.0, 1.5).
func PyFloat(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1e16 {
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprint(x)
}

// KindName is the Python name of an unpickled value's kind.
func KindName(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case *Dict:
		return "dict"
	case *List:
		return "list"
	case Tuple:
		return "tuple"
	case *Tensor:
		return "tensor"
	case string:
		return "str"
	case int64:
		return "int"
	case float64:
		return "float"
	case bool:
		return "bool"
	}
	return fmt.Sprintf("%T", v)
}

// Lookup follows a path of string keys through nested dicts: ok is
// false when a step is missing or not a dict.
func Lookup(d *Dict, keys ...string) (any, bool) {
	var v any = d
	for _, k := range keys {
		dd, ok := v.(*Dict)
		if !ok {
			return nil, false
		}
		if v, ok = dd.Get(k); !ok {
			return nil, false
		}
	}
	return v, true
}
