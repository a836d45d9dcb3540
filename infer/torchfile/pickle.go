package torchfile

// The unpickler: a stack machine over pickle protocols 2 to 5 that builds
// plain values and admits only the globals a state dict needs (allowed).
// Nothing is ever executed: a global is a name looked up in a fixed table,
// and REDUCE applies only the table's three constructors.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// Values the unpickler builds: nil (None), bool, int64, *big.Int (an int
// over 64 bits), float64, string, []byte, *List, Tuple, *Dict (dict and
// OrderedDict; sets become a *List), *Tensor, DType (torch.float32 and the
// like), and internally *Storage and global.

// List is a Python list (or set, in insertion order).
type List struct{ Items []any }

// Tuple is a Python tuple.
type Tuple []any

// Dict is a Python dict or collections.OrderedDict in insertion order. Keys
// are None, bool, int64, float64 or string.
type Dict struct {
	Keys, Values []any
	index        map[any]int
	// Ordered is true for a collections.OrderedDict.
	Ordered bool
}

// Get returns the value of key.
func (d *Dict) Get(key any) (any, bool) {
	if d == nil {
		return nil, false
	}
	i, ok := d.index[key]
	if !ok {
		return nil, false
	}
	return d.Values[i], true
}

// Len is the number of items.
func (d *Dict) Len() int { return len(d.Keys) }

func newDict(ordered bool) *Dict { return &Dict{index: map[any]int{}, Ordered: ordered} }

func (d *Dict) set(k, v any) error {
	switch k.(type) {
	case nil, bool, int64, float64, string:
	default:
		return fmt.Errorf("a dict key of type %s (canopy reads None, bool, int, float and str keys)", typeName(k))
	}
	if i, ok := d.index[k]; ok {
		d.Values[i] = v
		return nil
	}
	d.index[k] = len(d.Keys)
	d.Keys = append(d.Keys, k)
	d.Values = append(d.Values, v)
	return nil
}

// global is an admitted global before REDUCE applies it.
type global string

// The admitted globals: what torch.load(weights_only=True) needs for a
// state dict and a Lightning checkpoint's plain values.
var allowed = map[string]bool{
	"collections.OrderedDict":         true,
	"torch._utils._rebuild_tensor_v2": true,
	"torch._utils._rebuild_parameter": true,
	"torch.storage.UntypedStorage":    true,
	"torch.UntypedStorage":            true,
	"torch.FloatStorage":              true,
	"torch.DoubleStorage":             true,
	"torch.HalfStorage":               true,
	"torch.BFloat16Storage":           true,
	"torch.LongStorage":               true,
	"torch.IntStorage":                true,
	"torch.ShortStorage":              true,
	"torch.CharStorage":               true,
	"torch.ByteStorage":               true,
	"torch.BoolStorage":               true,
	"torch.float32":                   true,
	"torch.float64":                   true,
	"torch.float16":                   true,
	"torch.bfloat16":                  true,
	"torch.int64":                     true,
	"torch.int32":                     true,
	"torch.int16":                     true,
	"torch.int8":                      true,
	"torch.uint8":                     true,
	"torch.bool":                      true,
	"__builtin__.set":                 true,
	"builtins.set":                    true,
	"__builtin__.frozenset":           true,
	"builtins.frozenset":              true,
}

// ForbiddenGlobalError is the error for a global outside the allowlist.
type ForbiddenGlobalError struct{ Name string }

func (e *ForbiddenGlobalError) Error() string {
	return fmt.Sprintf("the pickle names the global %s, which canopy does not admit (it reads only tensors, OrderedDict and plain values, as torch.load(weights_only=True))", e.Name)
}

type unpickler struct {
	b     []byte
	pos   int
	stack []any
	marks []int
	memo  map[uint32]any
	// persistent resolves a BINPERSID id (a storage).
	persistent func(Tuple) (any, error)
	// rebuild makes a tensor from _rebuild_tensor_v2's arguments.
	rebuild func(Tuple) (any, error)
}

type opError struct {
	pos int
	msg string
}

func (e *opError) Error() string { return fmt.Sprintf("data.pkl at byte %d: %s", e.pos, e.msg) }
func (e *opError) Unwrap() error { return ErrFormat }

func (u *unpickler) fail(format string, a ...any) error {
	return &opError{u.pos, fmt.Sprintf(format, a...)}
}

func (u *unpickler) need(n uint64) ([]byte, error) {
	if n > uint64(len(u.b)-u.pos) {
		return nil, u.fail("%d bytes wanted, %d left (truncated pickle)", n, len(u.b)-u.pos)
	}
	s := u.b[u.pos : u.pos+int(n)]
	u.pos += int(n)
	return s, nil
}

func (u *unpickler) pop() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && len(u.stack) <= u.marks[len(u.marks)-1]) {
		return nil, u.fail("stack underflow")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && len(u.stack) <= u.marks[len(u.marks)-1]) {
		return nil, u.fail("stack underflow")
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark returns the items above the last MARK and removes them and the
// mark.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, u.fail("no MARK on the stack")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

func (u *unpickler) line() (string, error) {
	i := strings.IndexByte(string(u.b[u.pos:min(len(u.b), u.pos+256)]), '\n')
	if i < 0 {
		return "", u.fail("GLOBAL name without a newline within 256 bytes")
	}
	s := string(u.b[u.pos : u.pos+i])
	u.pos += i + 1
	return s, nil
}

func (u *unpickler) global(module, name string) (any, error) {
	full := module + "." + name
	if !allowed[full] {
		return nil, &ForbiddenGlobalError{Name: full}
	}
	if dt, ok := dtypeByGlobal[full]; ok {
		return dt, nil
	}
	return global(full), nil
}

func (u *unpickler) load() (any, error) {
	u.memo = map[uint32]any{}
	for {
		if u.pos >= len(u.b) {
			return nil, u.fail("the pickle ends without STOP (truncated)")
		}
		op := u.b[u.pos]
		u.pos++
		switch op {
		case 0x80: // PROTO
			p, err := u.need(1)
			if err != nil {
				return nil, err
			}
			if p[0] < 2 || p[0] > 5 {
				return nil, u.fail("pickle protocol %d (canopy reads 2 to 5)", p[0])
			}
		case 0x95: // FRAME: a length hint only
			if _, err := u.need(8); err != nil {
				return nil, err
			}
		case '.': // STOP
			v, err := u.pop()
			if err != nil {
				return nil, err
			}
			if len(u.stack) != 0 || len(u.marks) != 0 {
				return nil, u.fail("STOP with %d items and %d marks left on the stack", len(u.stack), len(u.marks))
			}
			return v, nil
		case '(': // MARK
			u.marks = append(u.marks, len(u.stack))
		case '0': // POP
			if _, err := u.pop(); err != nil {
				return nil, err
			}
		case '1': // POP_MARK
			if _, err := u.popMark(); err != nil {
				return nil, err
			}
		case '2': // DUP
			v, err := u.top()
			if err != nil {
				return nil, err
			}
			u.stack = append(u.stack, v)
		case 'N':
			u.stack = append(u.stack, nil)
		case 0x88:
			u.stack = append(u.stack, true)
		case 0x89:
			u.stack = append(u.stack, false)
		case 'J': // BININT
			b, err := u.need(4)
			if err != nil {
				return nil, err
			}
			u.stack = append(u.stack, int64(int32(binary.LittleEndian.Uint32(b))))
		case 'K': // BININT1
			b, err := u.need(1)
			if err != nil {
				return nil, err
			}
			u.stack = append(u.stack, int64(b[0]))
		case 'M': // BININT2
			b, err := u.need(2)
			if err != nil {
				return nil, err
			}
			u.stack = append(u.stack, int64(binary.LittleEndian.Uint16(b)))
		case 0x8a, 0x8b: // LONG1, LONG4
			var n uint64
			if op == 0x8a {
				b, err := u.need(1)
				if err != nil {
					return nil, err
				}
				n = uint64(b[0])
			} else {
				b, err := u.need(4)
				if err != nil {
					return nil, err
				}
				n = uint64(binary.LittleEndian.Uint32(b))
			}
			b, err := u.need(n)
			if err != nil {
				return nil, err
			}
			u.stack = append(u.stack, decodeLong(b))
		case 'G': // BINFLOAT
			b, err := u.need(8)
			if err != nil {
				return nil, err
			}
			u.stack = append(u.stack, math.Float64frombits(binary.BigEndian.Uint64(b)))
		case 'X', 0x8c, 0x8d, 'B', 'C', 0x8e: // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, BINBYTES, SHORT_BINBYTES, BINBYTES8
			var n uint64
			switch op {
			case 0x8c, 'C':
				b, err := u.need(1)
				if err != nil {
					return nil, err
				}
				n = uint64(b[0])
			case 'X', 'B':
				b, err := u.need(4)
				if err != nil {
					return nil, err
				}
				n = uint64(binary.LittleEndian.Uint32(b))
			default:
				b, err := u.need(8)
				if err != nil {
					return nil, err
				}
				n = binary.LittleEndian.Uint64(b)
			}
			b, err := u.need(n) // checked against what is left before anything is allocated
			if err != nil {
				return nil, err
			}
			if op == 'B' || op == 'C' || op == 0x8e {
				u.stack = append(u.stack, append([]byte(nil), b...))
			} else {
				u.stack = append(u.stack, string(b))
			}
		case '}':
			u.stack = append(u.stack, newDict(false))
		case ']', 0x8f: // EMPTY_LIST, EMPTY_SET
			u.stack = append(u.stack, &List{})
		case ')':
			u.stack = append(u.stack, Tuple{})
		case 'd', 'l', 't', 0x91: // DICT, LIST, TUPLE, FROZENSET
			items, err := u.popMark()
			if err != nil {
				return nil, err
			}
			switch op {
			case 'd':
				if len(items)%2 != 0 {
					return nil, u.fail("DICT with an odd number of items")
				}
				d := newDict(false)
				for i := 0; i < len(items); i += 2 {
					if err := d.set(items[i], items[i+1]); err != nil {
						return nil, u.fail("%v", err)
					}
				}
				u.stack = append(u.stack, d)
			case 'l', 0x91:
				u.stack = append(u.stack, &List{Items: items})
			default:
				u.stack = append(u.stack, Tuple(items))
			}
		case 0x85, 0x86, 0x87: // TUPLE1..3
			n := int(op - 0x84)
			if len(u.stack) < n || (len(u.marks) > 0 && len(u.stack)-n < u.marks[len(u.marks)-1]) {
				return nil, u.fail("stack underflow")
			}
			t := append(Tuple(nil), u.stack[len(u.stack)-n:]...)
			u.stack = append(u.stack[:len(u.stack)-n], t)
		case 'a': // APPEND
			v, err := u.pop()
			if err != nil {
				return nil, err
			}
			if err := u.appendTo([]any{v}); err != nil {
				return nil, err
			}
		case 'e', 0x90: // APPENDS, ADDITEMS
			items, err := u.popMark()
			if err != nil {
				return nil, err
			}
			if err := u.appendTo(items); err != nil {
				return nil, err
			}
		case 's': // SETITEM
			v, err := u.pop()
			if err != nil {
				return nil, err
			}
			k, err := u.pop()
			if err != nil {
				return nil, err
			}
			if err := u.setItems([]any{k, v}); err != nil {
				return nil, err
			}
		case 'u': // SETITEMS
			items, err := u.popMark()
			if err != nil {
				return nil, err
			}
			if len(items)%2 != 0 {
				return nil, u.fail("SETITEMS with an odd number of items")
			}
			if err := u.setItems(items); err != nil {
				return nil, err
			}
		case 'q', 'r', 0x94: // BINPUT, LONG_BINPUT, MEMOIZE
			var i uint32
			switch op {
			case 'q':
				b, err := u.need(1)
				if err != nil {
					return nil, err
				}
				i = uint32(b[0])
			case 'r':
				b, err := u.need(4)
				if err != nil {
					return nil, err
				}
				i = binary.LittleEndian.Uint32(b)
			default:
				i = uint32(len(u.memo))
			}
			v, err := u.top()
			if err != nil {
				return nil, err
			}
			u.memo[i] = v
		case 'h', 'j': // BINGET, LONG_BINGET
			var i uint32
			if op == 'h' {
				b, err := u.need(1)
				if err != nil {
					return nil, err
				}
				i = uint32(b[0])
			} else {
				b, err := u.need(4)
				if err != nil {
					return nil, err
				}
				i = binary.LittleEndian.Uint32(b)
			}
			v, ok := u.memo[i]
			if !ok {
				return nil, u.fail("memo entry %d was never stored", i)
			}
			u.stack = append(u.stack, v)
		case 'c': // GLOBAL
			module, err := u.line()
			if err != nil {
				return nil, err
			}
			name, err := u.line()
			if err != nil {
				return nil, err
			}
			g, err := u.global(module, name)
			if err != nil {
				return nil, err
			}
			u.stack = append(u.stack, g)
		case 0x93: // STACK_GLOBAL
			n, err := u.pop()
			if err != nil {
				return nil, err
			}
			m, err := u.pop()
			if err != nil {
				return nil, err
			}
			ms, ok1 := m.(string)
			ns, ok2 := n.(string)
			if !ok1 || !ok2 {
				return nil, u.fail("STACK_GLOBAL of %s and %s, want two strings", typeName(m), typeName(n))
			}
			g, err := u.global(ms, ns)
			if err != nil {
				return nil, err
			}
			u.stack = append(u.stack, g)
		case 'R': // REDUCE
			args, err := u.pop()
			if err != nil {
				return nil, err
			}
			f, err := u.pop()
			if err != nil {
				return nil, err
			}
			v, err := u.reduce(f, args)
			if err != nil {
				return nil, err
			}
			u.stack = append(u.stack, v)
		case 'b': // BUILD
			state, err := u.pop()
			if err != nil {
				return nil, err
			}
			inst, err := u.top()
			if err != nil {
				return nil, err
			}
			// OrderedDict's state is its __dict__ (a state dict's
			// _metadata), which canopy does not need; a tensor's
			// state is not admitted.
			d, ok := inst.(*Dict)
			if !ok || !d.Ordered {
				return nil, u.fail("BUILD on %s (canopy admits it only on an OrderedDict)", typeName(inst))
			}
			if _, ok := state.(*Dict); !ok && state != nil {
				return nil, u.fail("BUILD of an OrderedDict with %s, want a dict", typeName(state))
			}
		case 'Q': // BINPERSID
			pid, err := u.pop()
			if err != nil {
				return nil, err
			}
			t, ok := pid.(Tuple)
			if !ok {
				return nil, u.fail("persistent id is %s, want a tuple", typeName(pid))
			}
			v, err := u.persistent(t)
			if err != nil {
				return nil, u.fail("%v", err)
			}
			u.stack = append(u.stack, v)
		default:
			return nil, u.fail("opcode 0x%02x is not admitted (canopy reads the opcodes torch.save writes)", op)
		}
	}
}

func (u *unpickler) appendTo(items []any) error {
	t, err := u.top()
	if err != nil {
		return err
	}
	l, ok := t.(*List)
	if !ok {
		return u.fail("APPEND to %s, want a list", typeName(t))
	}
	l.Items = append(l.Items, items...)
	return nil
}

func (u *unpickler) setItems(items []any) error {
	t, err := u.top()
	if err != nil {
		return err
	}
	d, ok := t.(*Dict)
	if !ok {
		return u.fail("SETITEM on %s, want a dict", typeName(t))
	}
	for i := 0; i < len(items); i += 2 {
		if err := d.set(items[i], items[i+1]); err != nil {
			return u.fail("%v", err)
		}
	}
	return nil
}

func (u *unpickler) reduce(f, args any) (any, error) {
	g, ok := f.(global)
	if !ok {
		return nil, u.fail("REDUCE applies %s, want an admitted global", typeName(f))
	}
	a, ok := args.(Tuple)
	if !ok {
		return nil, u.fail("REDUCE of %s with %s, want a tuple", g, typeName(args))
	}
	switch g {
	case "collections.OrderedDict":
		if len(a) != 0 {
			return nil, u.fail("collections.OrderedDict with %d arguments, want none", len(a))
		}
		return newDict(true), nil
	case "__builtin__.set", "builtins.set", "__builtin__.frozenset", "builtins.frozenset":
		if len(a) == 0 {
			return &List{}, nil
		}
		if l, ok := a[0].(*List); ok && len(a) == 1 {
			return &List{Items: append([]any(nil), l.Items...)}, nil
		}
		return nil, u.fail("%s of %d arguments, want none or one list", g, len(a))
	case "torch._utils._rebuild_tensor_v2":
		v, err := u.rebuild(a)
		if err != nil {
			return nil, u.fail("%s: %v", g, err)
		}
		return v, nil
	case "torch._utils._rebuild_parameter":
		// (data, requires_grad, backward_hooks): the tensor itself.
		if len(a) != 3 {
			return nil, u.fail("%s with %d arguments, want 3", g, len(a))
		}
		t, ok := a[0].(*Tensor)
		if !ok {
			return nil, u.fail("%s of %s, want a tensor", g, typeName(a[0]))
		}
		return t, nil
	}
	return nil, u.fail("REDUCE applies %s, which only a persistent id may name", g)
}

// decodeLong is a two's-complement little-endian integer, as LONG1/LONG4
// store it.
func decodeLong(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	if len(b) <= 8 {
		var v uint64
		for i := len(b) - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		shift := uint(64 - 8*len(b))
		return int64(v<<shift) >> shift
	}
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	z := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		z.Sub(z, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return z
}

func typeName(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case *List:
		return "list"
	case Tuple:
		return "tuple"
	case *Dict:
		if v.Ordered {
			return "OrderedDict"
		}
		return "dict"
	case *Tensor:
		return "tensor"
	case *Storage:
		return "storage"
	case DType:
		return "dtype " + v.String()
	case global:
		return "global " + string(v)
	}
	return fmt.Sprintf("%T", v)
}
