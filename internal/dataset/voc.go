package dataset

// Pascal VOC XML annotations and WKT geometry cells, as DeepForest's
// utilities.read_file takes them (DeepForest 1bad4419 utilities.py:
// read_pascal_voc, __pandas_to_geodataframe__; datasets/training.py takes a
// geometry's bounds as the box).

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// MaxVOCFile is the largest VOC XML file read.
const MaxVOCFile = 64 << 20

type vocDoc struct {
	XMLName  xml.Name    `xml:"annotation"`
	Filename *string     `xml:"filename"`
	Objects  []vocObject `xml:"object"`
}

type vocObject struct {
	Name   *string `xml:"name"`
	BndBox *struct {
		Xmin *string `xml:"xmin"`
		Ymin *string `xml:"ymin"`
		Xmax *string `xml:"xmax"`
		Ymax *string `xml:"ymax"`
	} `xml:"bndbox"`
}

// ParseVOC reads one Pascal VOC annotation file (RectLabel's form, as
// DeepForest's read_pascal_voc reads it) into DeepForest CSV rows:
// image_path is the base name of <filename>; each <object> gives its
// <name> and <bndbox> xmin, ymin, xmax, ymax, integers as Python's int()
// reads them, other numbers rounded half to even (np.round). A missing
// field, or a file without objects (DeepForest fails on it too), is an
// error naming the file and the field.
func ParseVOC(name string, data []byte) ([]Row, error) {
	if len(data) > MaxVOCFile {
		return nil, fmt.Errorf("dataset: %s: %d bytes, over the %d-byte limit of a VOC file: %w", name, len(data), MaxVOCFile, ErrInput)
	}
	var doc vocDoc
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("dataset: %s: not a Pascal VOC annotation: %v: %w", name, err, ErrInput)
	}
	if doc.Filename == nil || strings.TrimSpace(*doc.Filename) == "" {
		return nil, fmt.Errorf("dataset: %s: <annotation> has no <filename>: %w", name, ErrInput)
	}
	img := path.Base(strings.ReplaceAll(strings.TrimSpace(*doc.Filename), `\`, "/"))
	if img == "/" || img == "." {
		return nil, fmt.Errorf("dataset: %s: <filename> %q names no file: %w", name, *doc.Filename, ErrInput)
	}
	if len(doc.Objects) == 0 {
		return nil, fmt.Errorf("dataset: %s: no <object> in <annotation> (DeepForest's read_pascal_voc fails on it too; leave the image out, or give it a 0,0,0,0 row in a CSV): %w", name, ErrInput)
	}
	rows := make([]Row, 0, len(doc.Objects))
	for i, o := range doc.Objects {
		at := fmt.Sprintf("%s: object %d", name, i+1)
		if o.Name == nil || *o.Name == "" {
			return nil, fmt.Errorf("dataset: %s has no <name>: %w", at, ErrInput)
		}
		if o.BndBox == nil {
			return nil, fmt.Errorf("dataset: %s has no <bndbox>: %w", at, ErrInput)
		}
		var v [4]float64
		for k, f := range []struct {
			tag string
			s   *string
		}{{"xmin", o.BndBox.Xmin}, {"ymin", o.BndBox.Ymin}, {"xmax", o.BndBox.Xmax}, {"ymax", o.BndBox.Ymax}} {
			if f.s == nil {
				return nil, fmt.Errorf("dataset: %s: <bndbox> has no <%s>: %w", at, f.tag, ErrInput)
			}
			x, err := roundWithFloats(*f.s)
			if err != nil {
				return nil, fmt.Errorf("dataset: %s: <%s>: %v: %w", at, f.tag, err, ErrInput)
			}
			v[k] = x
		}
		r := Row{Path: img, Label: *o.Name, Line: i + 1}
		r.Box.Xmin, r.Box.Ymin, r.Box.Xmax, r.Box.Ymax = v[0], v[1], v[2], v[3]
		if r.Box.Xmax < r.Box.Xmin || r.Box.Ymax < r.Box.Ymin {
			return nil, fmt.Errorf("dataset: %s: box %v,%v,%v,%v has max < min: %w", at, v[0], v[1], v[2], v[3], ErrInput)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// roundWithFloats is DeepForest's round_with_floats: int(x), else
// int(np.round(float(x))) (half to even).
func roundWithFloats(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if n, ok := pyInt(t); ok {
		return n, nil
	}
	if !isDecimal(t) {
		return 0, fmt.Errorf("not a number: %q", s)
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsInf(f, 0) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("not a finite coordinate: %q", s)
	}
	return math.RoundToEven(f), nil
}

// pyInt is Python's int() of a decimal string: a sign, digits, single
// underscores between digits.
func pyInt(t string) (float64, bool) {
	u := strings.TrimLeft(t, "+-")
	if len(t)-len(u) > 1 || u == "" || u[0] == '_' || u[len(u)-1] == '_' || strings.Contains(u, "__") {
		return 0, false
	}
	d := strings.ReplaceAll(u, "_", "")
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseFloat(d, 64)
	if err != nil || n > 1<<53 {
		return 0, false
	}
	if strings.HasPrefix(t, "-") {
		n = -n
	}
	return n, true
}

// ReadVOCFolder reads every .xml file of dir (not recursive, sorted by
// name) and writes their rows as one DeepForest CSV, the truth canopy
// broadcasts.
func ReadVOCFolder(dir string) ([]byte, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() && strings.EqualFold(filepath.Ext(e.Name()), ".xml") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("dataset: %s holds no .xml annotation files: %w", dir, ErrInput)
	}
	var b bytes.Buffer
	b.WriteString("image_path,xmin,ymin,xmax,ymax,label\n")
	for _, n := range names {
		p := filepath.Join(dir, n)
		data, err := readFolderFile(p)
		if err != nil {
			return nil, err
		}
		rows, err := ParseVOC(p, data)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			fmt.Fprintf(&b, "%s,%s,%s,%s,%s,%s\n", csvQuote(r.Path), g(r.Box.Xmin), g(r.Box.Ymin), g(r.Box.Xmax), g(r.Box.Ymax), csvQuote(r.Label))
		}
	}
	return b.Bytes(), nil
}

// readFolderFile reads one file a folder listing gave (not a path the
// user named): opened without blocking (a FIFO would block the open until
// a writer comes, deaf to SIGTERM), only a regular file, its size checked
// on the open file before reading, the read bounded.
func readFolderFile(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("dataset: %s: not a regular file (%v): %w", p, fi.Mode().Type(), ErrInput)
	}
	if fi.Size() > MaxVOCFile {
		return nil, fmt.Errorf("dataset: %s: %d bytes, over the %d-byte limit of a VOC file: %w", p, fi.Size(), MaxVOCFile, ErrInput)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxVOCFile+1))
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	if int64(len(data)) > MaxVOCFile {
		return nil, fmt.Errorf("dataset: %s: over the %d-byte limit of a VOC file: %w", p, MaxVOCFile, ErrInput)
	}
	return data, nil
}

func g(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// wktBounds is the bounds of a WKT POLYGON or MULTIPOLYGON (all rings'
// coordinates), as shapely's .bounds gives them.
func wktBounds(s string) (xmin, ymin, xmax, ymax float64, err error) {
	t := strings.TrimSpace(s)
	up := strings.ToUpper(t)
	var body string
	switch {
	case strings.HasPrefix(up, "MULTIPOLYGON"):
		body = t[len("MULTIPOLYGON"):]
	case strings.HasPrefix(up, "POLYGON"):
		body = t[len("POLYGON"):]
	default:
		kind, _, _ := strings.Cut(up, "(")
		return 0, 0, 0, 0, fmt.Errorf("geometry %q: canopy reads POLYGON or MULTIPOLYGON boxes (their bounds), not %s", short(s), strings.TrimSpace(kind))
	}
	body = strings.TrimSpace(body)
	if strings.HasPrefix(strings.ToUpper(body), "EMPTY") || !strings.HasPrefix(body, "(") {
		return 0, 0, 0, 0, fmt.Errorf("geometry %q: an empty or malformed polygon", short(s))
	}
	depth, n := 0, 0
	xmin, ymin, xmax, ymax = math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for _, field := range strings.FieldsFunc(body, func(r rune) bool { return r == ',' }) {
		f := strings.TrimSpace(field)
		for strings.HasPrefix(f, "(") {
			depth++
			f = strings.TrimSpace(f[1:])
		}
		closing := 0
		for strings.HasSuffix(f, ")") {
			closing++
			f = strings.TrimSpace(f[:len(f)-1])
		}
		xy := strings.Fields(f)
		if len(xy) != 2 || depth == 0 {
			return 0, 0, 0, 0, fmt.Errorf("geometry %q: coordinate %q is not an x y pair", short(s), f)
		}
		var c [2]float64
		for k := range xy {
			if !isDecimal(xy[k]) {
				return 0, 0, 0, 0, fmt.Errorf("geometry %q: %q is not a number", short(s), xy[k])
			}
			if c[k], err = strconv.ParseFloat(xy[k], 64); err != nil || math.IsInf(c[k], 0) {
				return 0, 0, 0, 0, fmt.Errorf("geometry %q: %q is not a finite number", short(s), xy[k])
			}
		}
		xmin, xmax = math.Min(xmin, c[0]), math.Max(xmax, c[0])
		ymin, ymax = math.Min(ymin, c[1]), math.Max(ymax, c[1])
		n++
		depth -= closing
		if depth < 0 {
			return 0, 0, 0, 0, fmt.Errorf("geometry %q: unbalanced parentheses", short(s))
		}
	}
	if depth != 0 || n < 4 {
		return 0, 0, 0, 0, fmt.Errorf("geometry %q: a polygon needs a closed ring of at least 4 points in balanced parentheses", short(s))
	}
	return xmin, ymin, xmax, ymax, nil
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
