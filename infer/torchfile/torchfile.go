// Package torchfile reads the files torch.save writes (a state dict .pt, a
// Lightning .ckpt) without Python and without executing anything.
//
// Layout: a zip archive whose entries all sit in one folder <archive>/
// (torch names it after the file): data.pkl (the pickled object), data/<key>
// (each storage's raw bytes, little-endian, exactly numel·element size),
// version (the format version, or .data/version) and byteorder ("little";
// absent in old files). torch.save stores every entry uncompressed.
//
// The pickle is read by a minimal unpickler that admits what
// torch.load(weights_only=True) admits for a state dict: the protocol 2-5
// opcodes that build plain values (None, bool, int, float, str, bytes, list,
// tuple, dict, set), collections.OrderedDict, torch._utils._rebuild_tensor_v2
// and _rebuild_parameter, the storage types of the persistent ids
// (torch.FloatStorage … torch.UntypedStorage) and the dtype globals
// (torch.float32 …). Any other global is refused with a
// *ForbiddenGlobalError naming it; no code is ever run.
//
// Limits, checked before anything is allocated: the zip's entries are
// stored (no decompression bomb) and unique; a storage's numel·element size
// equals its entry's size; a tensor's shape, stride and offset lie within
// its storage and are C-contiguous (others are refused); and the tensors
// converted from one file hold no more elements than its storages, so a
// hostile file costs at most its size, plus four bytes per element
// converted to float32.
//
// github.com/nlpodyssey/gopickle v0.2.0 was not used: its unpickler
// allocates what a length field says before checking it against the data
// left, admits any unknown global as a GenericClass (and always
// copy_reg._reconstructor) unless every call site overrides it, and its
// torch loader allocates a storage of the size the pickle claims before
// comparing it with the zip entry, matches entries by base name only and
// keeps non-contiguous strides without checking them.
package torchfile

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/infer/safetensors"
)

// ErrFormat is wrapped by every error about a file's content (as opposed to
// failing to read it); a *ForbiddenGlobalError also matches it.
var ErrFormat = errors.New("invalid torch file")

func (e *ForbiddenGlobalError) Unwrap() error { return ErrFormat }

// DType is a tensor's element type.
type DType int

// The dtypes of torch's typed storages.
const (
	Float32 DType = iota + 1
	Float64
	Float16
	BFloat16
	Int64
	Int32
	Int16
	Int8
	Uint8
	Bool
)

var dtypeNames = map[DType]string{Float32: "float32", Float64: "float64", Float16: "float16", BFloat16: "bfloat16",
	Int64: "int64", Int32: "int32", Int16: "int16", Int8: "int8", Uint8: "uint8", Bool: "bool"}

func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return "dtype(" + strconv.Itoa(int(d)) + ")"
}

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Float64, Int64:
		return 8
	case Float32, Int32:
		return 4
	case Float16, BFloat16, Int16:
		return 2
	}
	return 1
}

// Float reports whether the dtype converts to float32.
func (d DType) Float() bool { return d == Float32 || d == Float64 || d == Float16 || d == BFloat16 }

var dtypeByGlobal = map[string]DType{
	"torch.float32": Float32, "torch.float64": Float64, "torch.float16": Float16, "torch.bfloat16": BFloat16,
	"torch.int64": Int64, "torch.int32": Int32, "torch.int16": Int16, "torch.int8": Int8, "torch.uint8": Uint8, "torch.bool": Bool,
}

var storageDType = map[global]DType{
	"torch.FloatStorage": Float32, "torch.DoubleStorage": Float64, "torch.HalfStorage": Float16, "torch.BFloat16Storage": BFloat16,
	"torch.LongStorage": Int64, "torch.IntStorage": Int32, "torch.ShortStorage": Int16, "torch.CharStorage": Int8,
	"torch.ByteStorage": Uint8, "torch.BoolStorage": Bool,
	"torch.UntypedStorage": Uint8, "torch.storage.UntypedStorage": Uint8,
}

// Storage is one data/<key> entry.
type Storage struct {
	Key   string
	DType DType
	Numel int64
	entry *zip.File
}

// Tensor is a C-contiguous view of a storage.
type Tensor struct {
	Storage *Storage
	Offset  int64
	Shape   []int
	DType   DType
}

// Numel is the product of the shape.
func (t *Tensor) Numel() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// File is a loaded torch.save file. Root is the unpickled object; tensors
// read their data on demand (Float32).
type File struct {
	Name    string
	Archive string // the zip's top folder
	Version int
	Root    any

	closer  io.Closer
	scratch []byte // Float32's read buffer, reused
	stored  int64  // elements in all storages the pickle named
	handed  int64  // elements Float32 has converted
	entries int
}

type formatError struct{ msg string }

func (e *formatError) Error() string { return e.msg }
func (e *formatError) Unwrap() error { return ErrFormat }

func bad(format string, a ...any) error { return &formatError{fmt.Sprintf(format, a...)} }

func (f *File) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("torchfile: %s: %w", f.Name, err)
}

// Open reads the file at path: its zip directory and data.pkl. The file
// stays open for Float32 until Close.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("torchfile: %w", err)
	}
	fi, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("torchfile: %w", err)
	}
	if !fi.Mode().IsRegular() {
		fh.Close()
		return nil, fmt.Errorf("torchfile: %s: not a regular file: %w", path, ErrFormat)
	}
	f, err := Read(path, fh, fi.Size())
	if err != nil {
		fh.Close()
		return nil, err
	}
	f.closer = fh
	return f, nil
}

// Close closes the file Open opened.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer = nil
	return err
}

// Read reads a torch.save archive of size bytes from r; name is for the
// messages.
func Read(name string, r io.ReaderAt, size int64) (*File, error) {
	f := &File{Name: name}
	z, err := zip.NewReader(r, size)
	if err != nil {
		// io.EOF too: a central directory whose records run past the
		// file's end (found by FuzzRead: "f.pt: EOF", without ErrFormat)
		if errors.Is(err, zip.ErrFormat) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, f.wrap(bad("not a torch.save zip archive (truncated or not a zip: %v); canopy reads files torch.save wrote with its default zip format (torch >= 1.6)", err))
		}
		return nil, f.wrap(err)
	}
	byName := make(map[string]*zip.File, len(z.File))
	for _, e := range z.File {
		if _, dup := byName[e.Name]; dup {
			return nil, f.wrap(bad("zip entry %q appears twice", e.Name))
		}
		byName[e.Name] = e
		if e.Method != zip.Store {
			return nil, f.wrap(bad("zip entry %q is compressed (method %d): torch.save stores entries uncompressed", e.Name, e.Method))
		}
		if e.UncompressedSize64 > uint64(size) {
			return nil, f.wrap(bad("zip entry %q claims %d bytes in a %d-byte file", e.Name, e.UncompressedSize64, size))
		}
	}
	f.entries = len(z.File)
	var pkl *zip.File
	for _, e := range z.File {
		dir, base, ok := strings.Cut(e.Name, "/")
		if !ok || dir == "" {
			return nil, f.wrap(bad("zip entry %q is not inside the archive folder", e.Name))
		}
		if f.Archive == "" {
			f.Archive = dir
		} else if dir != f.Archive {
			return nil, f.wrap(bad("zip entries in two top folders (%q and %q): not one torch.save archive", f.Archive, dir))
		}
		if base == "data.pkl" {
			pkl = e
		}
	}
	if pkl == nil {
		if _, ok := byName[f.Archive+"/constants.pkl"]; ok {
			return nil, f.wrap(bad("a TorchScript archive (constants.pkl): canopy reads state dicts saved with torch.save"))
		}
		return nil, f.wrap(bad("no %s/data.pkl: not a torch.save archive", f.Archive))
	}
	small := func(entry string) (string, bool, error) {
		e, ok := byName[f.Archive+"/"+entry]
		if !ok {
			return "", false, nil
		}
		if e.UncompressedSize64 > 64 {
			return "", true, bad("%s holds %d bytes, want a short line", e.Name, e.UncompressedSize64)
		}
		b, err := readEntry(e)
		return strings.TrimSpace(string(b)), true, err
	}
	v, ok, err := small("version")
	if err == nil && !ok {
		v, ok, err = small(".data/version")
	}
	if err != nil {
		return nil, f.wrap(err)
	}
	if !ok {
		return nil, f.wrap(bad("no %s/version record: not a torch.save archive", f.Archive))
	}
	if f.Version, err = strconv.Atoi(v); err != nil || f.Version < 1 || f.Version > 64 {
		return nil, f.wrap(bad("%s/version holds %q, want a format version number", f.Archive, v))
	}
	bo, ok, err := small("byteorder")
	if err != nil {
		return nil, f.wrap(err)
	}
	if ok && bo != "little" {
		return nil, f.wrap(bad("byteorder %q: canopy reads little-endian files (torch.save on x86 and ARM)", bo))
	}
	data, err := readEntry(pkl)
	if err != nil {
		return nil, f.wrap(err)
	}
	u := &unpickler{b: data, persistent: f.storageLoader(byName)}
	u.rebuild = rebuildTensor
	root, err := u.load()
	if err != nil {
		return nil, f.wrap(err)
	}
	f.Root = root
	return f, nil
}

// ReadPickle unpickles a data.pkl on its own, under the same rules, for
// tools and tests that inspect a checkpoint's structure: its storages have
// no data (Float32 refuses them), and Storages lists them in the order the
// pickle names them.
func ReadPickle(name string, data []byte) (*File, []*Storage, error) {
	f := &File{Name: name}
	var list []*Storage
	load := f.storageLoader(nil)
	u := &unpickler{b: data, rebuild: rebuildTensor, persistent: func(t Tuple) (any, error) {
		v, err := load(t)
		if s, ok := v.(*Storage); ok && err == nil && s.entry == nil && !contains(list, s) {
			list = append(list, s)
		}
		return v, err
	}}
	root, err := u.load()
	if err != nil {
		return nil, nil, f.wrap(err)
	}
	f.Root = root
	return f, list, nil
}

func contains(l []*Storage, s *Storage) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// storageLoader resolves persistent ids to the storages of byName (nil:
// storages without data, for ReadPickle).
func (f *File) storageLoader(byName map[string]*zip.File) func(Tuple) (any, error) {
	storages := map[string]*Storage{}
	return func(t Tuple) (any, error) {
		if len(t) != 5 {
			return nil, fmt.Errorf("persistent id of %d items, want ('storage', type, key, location, numel)", len(t))
		}
		if s, _ := t[0].(string); s != "storage" {
			return nil, fmt.Errorf("persistent id kind %v, want 'storage'", t[0])
		}
		g, _ := t[1].(global)
		dt, ok := storageDType[g]
		if !ok {
			return nil, fmt.Errorf("storage type %s, want a torch storage class", typeName(t[1]))
		}
		key, ok1 := t[2].(string)
		_, ok2 := t[3].(string)
		numel, ok3 := t[4].(int64)
		if !ok1 || !ok2 || !ok3 || numel < 0 {
			return nil, fmt.Errorf("persistent id (%s, %s, %s), want (str key, str location, int numel >= 0)", typeName(t[2]), typeName(t[3]), typeName(t[4]))
		}
		if key == "" || strings.ContainsAny(key, "/\\") || key == "." || key == ".." {
			return nil, fmt.Errorf("storage key %q is not a plain entry name", key)
		}
		if s, ok := storages[key]; ok {
			if s.DType != dt || s.Numel != numel {
				return nil, fmt.Errorf("storage %s named twice, as %d %s and as %d %s", key, s.Numel, s.DType, numel, dt)
			}
			return s, nil
		}
		s := &Storage{Key: key, DType: dt, Numel: numel}
		if byName != nil {
			e, ok := byName[f.Archive+"/data/"+key]
			if !ok {
				return nil, fmt.Errorf("storage %s has no entry %s/data/%s", key, f.Archive, key)
			}
			if uint64(numel) > e.UncompressedSize64/uint64(dt.Size()) || uint64(numel)*uint64(dt.Size()) != e.UncompressedSize64 {
				return nil, fmt.Errorf("storage %s claims %d %s elements (%s bytes), but its entry holds %d bytes", key, numel, dt, mulString(numel, dt.Size()), e.UncompressedSize64)
			}
			s.entry = e
			f.stored += numel
		}
		storages[key] = s
		return s, nil
	}
}

func mulString(n int64, k int) string {
	if n > math.MaxInt64/int64(k) {
		return "over 2^63"
	}
	return strconv.FormatInt(n*int64(k), 10)
}

// readEntry reads a whole stored entry (its size already checked against
// the file's), verifying its CRC-32.
func readEntry(e *zip.File) ([]byte, error) { return readEntryInto(e, nil) }

// readEntryInto is readEntry into buf when it is large enough.
func readEntryInto(e *zip.File, buf []byte) ([]byte, error) {
	rc, err := e.Open()
	if err != nil {
		return nil, bad("entry %s: %v", e.Name, err)
	}
	defer rc.Close()
	b := buf
	if uint64(cap(b)) < e.UncompressedSize64 {
		b = make([]byte, e.UncompressedSize64)
	}
	b = b[:e.UncompressedSize64]
	if _, err := io.ReadFull(rc, b); err != nil {
		return nil, bad("entry %s: %v (truncated file?)", e.Name, err)
	}
	if _, err := rc.Read(make([]byte, 1)); err != io.EOF {
		return nil, bad("entry %s: %v (corrupt file?)", e.Name, err)
	}
	return b, nil
}

// MaxDims is the most dimensions a tensor may have.
const MaxDims = 16

// rebuildTensor checks _rebuild_tensor_v2's arguments (storage, offset,
// size, stride, requires_grad, backward_hooks[, metadata]).
func rebuildTensor(a Tuple) (any, error) {
	if len(a) != 6 && len(a) != 7 {
		return nil, fmt.Errorf("%d arguments, want 6 or 7", len(a))
	}
	s, ok := a[0].(*Storage)
	if !ok {
		return nil, fmt.Errorf("argument 1 is %s, want a storage", typeName(a[0]))
	}
	off, ok := a[1].(int64)
	if !ok || off < 0 {
		return nil, fmt.Errorf("storage offset %v, want an int >= 0", a[1])
	}
	size, ok1 := a[2].(Tuple)
	stride, ok2 := a[3].(Tuple)
	if !ok1 || !ok2 || len(size) != len(stride) || len(size) > MaxDims {
		return nil, fmt.Errorf("size %s and stride %s, want two tuples of the same length (at most %d)", typeName(a[2]), typeName(a[3]), MaxDims)
	}
	if _, ok := a[4].(bool); !ok {
		return nil, fmt.Errorf("requires_grad is %s, want a bool", typeName(a[4]))
	}
	if h, ok := a[5].(*Dict); !ok || h.Len() != 0 {
		return nil, fmt.Errorf("backward hooks %s, want an empty OrderedDict", typeName(a[5]))
	}
	if len(a) == 7 {
		if _, ok := a[6].(*Dict); !ok && a[6] != nil {
			return nil, fmt.Errorf("metadata %s, want a dict", typeName(a[6]))
		}
	}
	t := &Tensor{Storage: s, Offset: off, DType: s.DType, Shape: make([]int, len(size))}
	numel := int64(1)
	zero := false
	for i := range size {
		d, ok := size[i].(int64)
		if !ok || d < 0 || d > math.MaxInt32 {
			return nil, fmt.Errorf("size %v: dimension %d is not an int in [0, 2^31)", size, i)
		}
		t.Shape[i] = int(d)
		zero = zero || d == 0
	}
	for i := range size {
		if zero {
			break
		}
		if numel > s.Numel/int64(t.Shape[i]) {
			return nil, fmt.Errorf("size %v holds more elements than its storage's %d", size, s.Numel)
		}
		numel *= int64(t.Shape[i])
	}
	if zero {
		numel = 0
	}
	// C-contiguous, as torch's is_contiguous: dimensions of size 1 may
	// have any stride.
	want := int64(1)
	for i := len(stride) - 1; i >= 0; i-- {
		st, ok := stride[i].(int64)
		if !ok {
			return nil, fmt.Errorf("stride %v is not a tuple of ints", stride)
		}
		if t.Shape[i] != 1 && st != want && numel != 0 {
			return nil, fmt.Errorf("size %v with stride %v is not contiguous (canopy reads C-contiguous tensors, as state_dict() saves them)", size, stride)
		}
		want *= int64(max(t.Shape[i], 1))
	}
	if off > s.Numel-numel {
		return nil, fmt.Errorf("offset %d + %d elements run past storage %s's %d", off, numel, s.Key, s.Numel)
	}
	return t, nil
}

// Float32 reads t's elements, converted exactly from float16 and bfloat16
// (float64 rounded to nearest). The elements converted from one file may
// not exceed those its storages hold (overlapping views are refused, so
// the float32 copies cost at most four bytes per stored element).
func (f *File) Float32(t *Tensor) ([]float32, error) {
	if !t.DType.Float() {
		return nil, f.wrap(bad("a tensor of dtype %s, want a floating-point one", t.DType))
	}
	if t.Storage.entry == nil {
		return nil, f.wrap(bad("storage %s has no data (read with ReadPickle)", t.Storage.Key))
	}
	n := t.Numel()
	if n > f.stored-f.handed {
		return nil, f.wrap(bad("tensors overlap: converting %d more elements would exceed the %d the storages hold", n, f.stored))
	}
	f.handed += n
	raw, err := readEntryInto(t.Storage.entry, f.scratch)
	if err != nil {
		return nil, f.wrap(err)
	}
	f.scratch = raw
	k := int64(t.DType.Size())
	b := raw[t.Offset*k : (t.Offset+n)*k]
	out := make([]float32, n)
	switch t.DType {
	case Float32:
		for i := range out {
			out[i] = math.Float32frombits(le32(b[4*i:]))
		}
	case Float64:
		for i := range out {
			out[i] = float32(math.Float64frombits(le64(b[8*i:])))
		}
	case Float16:
		for i := range out {
			out[i] = safetensors.F16ToF32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
		}
	case BFloat16:
		for i := range out {
			out[i] = safetensors.BF16ToF32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
		}
	}
	return out, nil
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
func le64(b []byte) uint64 { return uint64(le32(b)) | uint64(le32(b[4:]))<<32 }
