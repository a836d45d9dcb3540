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

	"github.com/canopy-hpc/canopy/box"
)

// MaxVOCFile is the largest VOC XML file read.
const MaxVOCFile = 64 << 20

type vocDoc struct {
	XMLName  xml.Name    `xml:"annotation"`
	Filename []string    `xml:"filename"`
	Objects  []vocObject `xml:"object"`
}

// vocObject keeps every occurrence of a field: xmltodict turns a repeated
// element into a list, on which DeepForest's read_pascal_voc fails (a
// TypeError), so a repeated field is refused, never the last one taken.
type vocObject struct {
	Name   []string    `xml:"name"`
	BndBox []vocBndBox `xml:"bndbox"`
}

type vocBndBox struct {
	Xmin []string `xml:"xmin"`
	Ymin []string `xml:"ymin"`
	Xmax []string `xml:"xmax"`
	Ymax []string `xml:"ymax"`
}

// vocOne is the one occurrence of a field: nil when absent, an error when
// repeated.
func vocOne(at, tag string, v []string) (*string, error) {
	switch len(v) {
	case 0:
		return nil, nil
	case 1:
		return &v[0], nil
	}
	return nil, fmt.Errorf("dataset: %s has %d <%s> elements, want one (DeepForest's read_pascal_voc fails on a repeated element): %w", at, len(v), tag, ErrInput)
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
	filename, err := vocOne(name+": <annotation>", "filename", doc.Filename)
	if err != nil {
		return nil, err
	}
	if filename == nil || strings.TrimSpace(*filename) == "" {
		return nil, fmt.Errorf("dataset: %s: <annotation> has no <filename>: %w", name, ErrInput)
	}
	img := path.Base(strings.ReplaceAll(strings.TrimSpace(*filename), `\`, "/"))
	if img == "/" || img == "." {
		return nil, fmt.Errorf("dataset: %s: <filename> %q names no file: %w", name, *filename, ErrInput)
	}
	if len(doc.Objects) == 0 {
		return nil, fmt.Errorf("dataset: %s: no <object> in <annotation> (DeepForest's read_pascal_voc fails on it too; leave the image out, or give it a 0,0,0,0 row in a CSV): %w", name, ErrInput)
	}
	rows := make([]Row, 0, len(doc.Objects))
	for i, o := range doc.Objects {
		at := fmt.Sprintf("%s: object %d", name, i+1)
		label, err := vocOne(at, "name", o.Name)
		if err != nil {
			return nil, err
		}
		if label == nil || *label == "" {
			return nil, fmt.Errorf("dataset: %s has no <name>: %w", at, ErrInput)
		}
		if len(o.BndBox) == 0 {
			return nil, fmt.Errorf("dataset: %s has no <bndbox>: %w", at, ErrInput)
		}
		if len(o.BndBox) > 1 {
			return nil, fmt.Errorf("dataset: %s has %d <bndbox> elements, want one (DeepForest's read_pascal_voc fails on a repeated element): %w", at, len(o.BndBox), ErrInput)
		}
		bb := o.BndBox[0]
		var v [4]float64
		for k, f := range []struct {
			tag string
			s   []string
		}{{"xmin", bb.Xmin}, {"ymin", bb.Ymin}, {"xmax", bb.Xmax}, {"ymax", bb.Ymax}} {
			s, err := vocOne(at+": <bndbox>", f.tag, f.s)
			if err != nil {
				return nil, err
			}
			if s == nil {
				return nil, fmt.Errorf("dataset: %s: <bndbox> has no <%s>: %w", at, f.tag, ErrInput)
			}
			x, err := roundWithFloats(*s)
			if err != nil {
				return nil, fmt.Errorf("dataset: %s: <%s>: %v: %w", at, f.tag, err, ErrInput)
			}
			v[k] = x
		}
		r := Row{Path: img, Label: *label, Line: i + 1}
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

// wktBounds is the bounds of a WKT POLYGON or MULTIPOLYGON as shapely's
// .bounds gives them: the bounds of each polygon's shell (its first ring),
// whatever its interior rings hold. Every ring must be closed (its last
// point its first) and hold at least 3 points, as GEOS's WKT reader
// demands (shapely 2.2.0, GEOS 3.14: tools/shapely/wkt_bounds.py); text
// after the geometry is refused. canopy is stricter than shapely on three
// forms only: non-finite coordinates, Z/M coordinates and EMPTY members.
func wktBounds(s string) (xmin, ymin, xmax, ymax float64, err error) {
	t := strings.TrimSpace(s)
	up := strings.ToUpper(t)
	multi := false
	switch {
	case strings.HasPrefix(up, "MULTIPOLYGON"):
		t, multi = t[len("MULTIPOLYGON"):], true
	case strings.HasPrefix(up, "POLYGON"):
		t = t[len("POLYGON"):]
	default:
		kind, _, _ := strings.Cut(up, "(")
		return 0, 0, 0, 0, fmt.Errorf("geometry %q: canopy reads POLYGON or MULTIPOLYGON boxes (their bounds), not %s", short(s), strings.TrimSpace(kind))
	}
	t = strings.TrimSpace(t)
	if strings.HasPrefix(strings.ToUpper(t), "EMPTY") || !strings.HasPrefix(t, "(") {
		return 0, 0, 0, 0, fmt.Errorf("geometry %q: an empty or malformed polygon", short(s))
	}
	p := wktParser{s: t}
	b := [4]float64{math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)}
	if multi {
		err = p.list(func() error { return p.polygon(&b) })
	} else {
		err = p.polygon(&b)
	}
	if err == nil && strings.TrimSpace(p.s[p.i:]) != "" {
		err = fmt.Errorf("text after the geometry: %q", short(strings.TrimSpace(p.s[p.i:])))
	}
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("geometry %q: %v", short(s), err)
	}
	return b[0], b[1], b[2], b[3], nil
}

// wktParser reads the parenthesised body of a WKT polygon.
type wktParser struct {
	s string
	i int
}

func (p *wktParser) skip() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

// expect consumes c after blanks.
func (p *wktParser) expect(c byte) error {
	p.skip()
	if p.i >= len(p.s) {
		return fmt.Errorf("unbalanced parentheses: %q expected at the end", c)
	}
	if p.s[p.i] != c {
		return fmt.Errorf("%q expected at %q", c, short(p.s[p.i:]))
	}
	p.i++
	return nil
}

// list reads "( item, item, ... )".
func (p *wktParser) list(item func() error) error {
	if err := p.expect('('); err != nil {
		return err
	}
	for {
		if err := item(); err != nil {
			return err
		}
		p.skip()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		return p.expect(')')
	}
}

// polygon reads one polygon's rings, widening b by its shell's bounds.
func (p *wktParser) polygon(b *[4]float64) error {
	rings, err := p.rings()
	if err != nil {
		return err
	}
	// in order, by comparison (as GEOS's envelope: the first of 0 and -0
	// stays, where math.Min would take -0); interior rings do not widen
	// .bounds
	for _, c := range rings[0] {
		for k, v := range [2]float64{c.X, c.Y} {
			if v < b[k] {
				b[k] = v
			}
			if v > b[k+2] {
				b[k+2] = v
			}
		}
	}
	return nil
}

// rings reads one polygon's rings, shell first; each must be closed and
// hold at least 3 points.
func (p *wktParser) rings() (box.Polygon, error) {
	var poly box.Polygon
	err := p.list(func() error {
		var ring box.Ring
		if err := p.list(func() error {
			xy, err := p.point()
			ring = append(ring, box.Point{X: xy[0], Y: xy[1]})
			return err
		}); err != nil {
			return err
		}
		n := len(poly) + 1
		if first, last := ring[0], ring[len(ring)-1]; first != last {
			return fmt.Errorf("ring %d is not closed: it starts at %v %v and ends at %v %v (shapely refuses it)", n, g(first.X), g(first.Y), g(last.X), g(last.Y))
		}
		if len(ring) < 3 {
			return fmt.Errorf("ring %d has %d points, want at least 3 (shapely refuses it)", n, len(ring))
		}
		poly = append(poly, ring)
		return nil
	})
	return poly, err
}

// point reads "x y": two finite decimal numbers.
func (p *wktParser) point() (xy [2]float64, err error) {
	p.skip()
	j := p.i
	for j < len(p.s) && p.s[j] != ',' && p.s[j] != ')' && p.s[j] != '(' {
		j++
	}
	f := strings.Fields(p.s[p.i:j])
	if len(f) != 2 {
		return xy, fmt.Errorf("coordinate %q is not an x y pair", short(strings.TrimSpace(p.s[p.i:j])))
	}
	p.i = j
	for k := range f {
		if !isDecimal(f[k]) {
			return xy, fmt.Errorf("%q is not a number", f[k])
		}
		if xy[k], err = strconv.ParseFloat(f[k], 64); err != nil || math.IsInf(xy[k], 0) {
			return xy, fmt.Errorf("%q is not a finite number", f[k])
		}
	}
	return xy, nil
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
