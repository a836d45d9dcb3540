// Command synth generates canopy's synthetic test sets: DeepForest-style
// annotation and prediction CSVs with empty frames, several classes, images
// without predictions, perturbed and spurious predictions. It is seeded and
// deterministic: `go run ./cmd/synth -out testdata/sets` rewrites the
// same bytes.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

type row struct {
	path                   string
	xmin, ymin, xmax, ymax float64
	label                  string
	score                  float64
}

type set struct {
	name        string
	truth, pred []row
	labelDict   []string // written as label_dict.csv when set
	truthHeader []string // column order of truth.csv
	scoreCol    string
}

func main() {
	out := flag.String("out", "testdata/sets", "output folder")
	big := flag.String("big", "", "instead, write one benchmark set (truth.csv, predictions.csv) into this folder")
	images := flag.Int("images", 2000, "images of the -big set")
	boxes := flag.Int("boxes", 30, "truth boxes per image of the -big set")
	dets := flag.Int("dets", 0, "predictions per image of the -big set (default: boxes+1)")
	classes := flag.Int("classes", 1, "classes of the -big set")
	flag.Parse()
	if *big != "" {
		s := bench(*images, *boxes, *dets, *classes)
		s.name = filepath.Base(*big)
		if err := write(filepath.Dir(*big), s); err != nil {
			fmt.Fprintln(os.Stderr, "synth:", err)
			os.Exit(1)
		}
		return
	}
	sets := []set{
		generate("multi", 1, 300, []string{"Alive", "Dead", "Snag"}, false),
		generate("single", 2, 200, []string{"Tree"}, true),
		edge(),
		three(),
		coco(),
	}
	sets[1].truthHeader = []string{"image_path", "xmin", "xmax", "ymin", "ymax", "label"} // SJER's order
	sets[1].scoreCol = "scores"
	sets[0].labelDict = []string{"Dead", "Alive", "Snag"}
	for _, s := range sets {
		if err := write(*out, s); err != nil {
			fmt.Fprintln(os.Stderr, "synth:", err)
			os.Exit(1)
		}
	}
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func write(dir string, s set) error {
	d := filepath.Join(dir, s.name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	th := s.truthHeader
	if th == nil {
		th = []string{"image_path", "xmin", "ymin", "xmax", "ymax", "label"}
	}
	var b strings.Builder
	b.WriteString(strings.Join(th, ",") + ",site\n")
	for _, r := range s.truth {
		vals := map[string]string{"image_path": r.path, "xmin": num(r.xmin), "ymin": num(r.ymin), "xmax": num(r.xmax), "ymax": num(r.ymax), "label": r.label}
		for _, c := range th {
			b.WriteString(vals[c] + ",")
		}
		b.WriteString("synth\n")
	}
	if err := os.WriteFile(filepath.Join(d, "truth.csv"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	sc := s.scoreCol
	if sc == "" {
		sc = "score"
	}
	b.Reset()
	b.WriteString("xmin,ymin,xmax,ymax,label," + sc + ",image_path\n")
	for _, r := range s.pred {
		fmt.Fprintf(&b, "%s,%s,%s,%s,%s,%s,%s\n", num(r.xmin), num(r.ymin), num(r.xmax), num(r.ymax), r.label, num(r.score), r.path)
	}
	if err := os.WriteFile(filepath.Join(d, "predictions.csv"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if s.labelDict != nil {
		b.Reset()
		b.WriteString("label,id\n")
		for i, l := range s.labelDict {
			fmt.Fprintf(&b, "%s,%d\n", l, i)
		}
		return os.WriteFile(filepath.Join(d, "label_dict.csv"), []byte(b.String()), 0o644)
	}
	return nil
}

func clamp(v, lo, hi float64) float64 { return max(lo, min(hi, v)) }

// generate makes n images of 400×400 px: ~5% empty frames (half of them
// with spurious predictions), ~8% images without predictions, the rest
// with jittered, dropped, relabelled and spurious predictions. integer
// selects integer coordinates (ties in the assignment are then common).
func generate(name string, seed uint64, n int, labels []string, integer bool) set {
	rng := rand.New(rand.NewPCG(seed, 0x63616e6f7079))
	s := set{name: name}
	round := func(v float64) float64 {
		if integer {
			return float64(int(v + 0.5))
		}
		return float64(int(v*100+0.5)) / 100
	}
	for i := 0; i < n; i++ {
		path := fmt.Sprintf("2019_SYN_%d_%06d_image_%03d.png", seed, 4000+i*7%97, i)
		if i%11 == 3 && i > 0 {
			// shuffle the paths' order relative to sorted order
			path = fmt.Sprintf("0_early_%s", path)
		}
		u := rng.Float64()
		if u < 0.05 {
			s.truth = append(s.truth, row{path: path, label: labels[0]})
			if rng.IntN(2) == 0 {
				for k := 0; k < 1+rng.IntN(3); k++ {
					x, y := rng.Float64()*350, rng.Float64()*350
					s.pred = append(s.pred, row{path, round(x), round(y), round(x + 20), round(y + 25), labels[rng.IntN(len(labels))], rng.Float64()})
				}
			}
			continue
		}
		nt := 1 + rng.IntN(30)
		var truth []row
		for k := 0; k < nt; k++ {
			w, h := 8+rng.Float64()*60, 8+rng.Float64()*60
			x, y := rng.Float64()*(400-w), rng.Float64()*(400-h)
			truth = append(truth, row{path, round(x), round(y), round(x + w), round(y + h), labels[rng.IntN(len(labels))], 0})
		}
		s.truth = append(s.truth, truth...)
		if i%37 == 5 {
			// a 0,0,0,0 row beside real rows: DeepForest drops it
			s.truth = append(s.truth, row{path: path, label: labels[0]})
		}
		if u < 0.13 {
			continue // no predictions for this image
		}
		for _, t := range truth {
			if rng.Float64() < 0.15 {
				continue // missed
			}
			j := func(v float64) float64 { return v + rng.NormFloat64()*4 }
			p := row{path: path, label: t.label, score: rng.Float64()}
			p.xmin, p.ymin = clamp(round(j(t.xmin)), 0, 399), clamp(round(j(t.ymin)), 0, 399)
			p.xmax, p.ymax = clamp(round(j(t.xmax)), p.xmin, 400), clamp(round(j(t.ymax)), p.ymin, 400)
			if rng.Float64() < 0.1 {
				p.label = labels[rng.IntN(len(labels))]
			}
			s.pred = append(s.pred, p)
			if rng.Float64() < 0.05 { // a duplicate competing for the same truth
				q := p
				q.xmin, q.xmax = clamp(p.xmin+round(rng.Float64()*6), 0, 399), clamp(p.xmax+round(rng.Float64()*6), 0, 400)
				q.score = rng.Float64()
				s.pred = append(s.pred, q)
			}
		}
		for k := rng.IntN(4); k > 0; k-- { // false positives
			x, y := rng.Float64()*360, rng.Float64()*360
			s.pred = append(s.pred, row{path, round(x), round(y), round(x + 10 + rng.Float64()*30), round(y + 10 + rng.Float64()*30), labels[rng.IntN(len(labels))], rng.Float64() * 0.5})
		}
	}
	// predictions for images that are not in the truth: ignored
	for k := 0; k < 5; k++ {
		s.pred = append(s.pred, row{fmt.Sprintf("not_in_truth_%d.png", k), 1, 2, 30, 40, labels[0], 0.9})
	}
	// interleave the images' rows, as a concatenated CSV would
	rng.Shuffle(len(s.pred), func(a, b int) {
		if s.pred[a].path == s.pred[b].path {
			return
		}
		s.pred[a], s.pred[b] = s.pred[b], s.pred[a]
	})
	return s
}

// edge holds the hand-made cases: IoU exactly 0.4, touching boxes, two
// predictions competing for one truth, zero-area boxes, a wide and a tall
// assignment, an empty frame predicted empty.
func edge() set {
	t := func(p string, a, b, c, d float64, l string) row { return row{p, a, b, c, d, l, 0} }
	pr := func(p string, a, b, c, d float64, l string, s float64) row { return row{p, a, b, c, d, l, s} }
	return set{
		name: "edge",
		truth: []row{
			t("iou_exactly_04.png", 0, 0, 10, 10, "Tree"), // pred 0,0,4,10: IoU 40/100 = 0.4, not a match
			t("iou_above_04.png", 0, 0, 10, 10, "Tree"),   // pred 0,0,4.1,10: IoU 0.41
			t("touching.png", 0, 0, 10, 10, "Tree"),       // pred 10,0,20,10 touches: area 0
			t("compete.png", 0, 0, 10, 10, "Tree"),        // two preds, one truth
			t("zero_area.png", 5, 5, 5, 15, "Tree"),       // a line
			t("zero_area.png", 20, 20, 40, 40, "Bird"),
			t("tall.png", 0, 0, 10, 10, "Tree"), // 3 truths, 1 pred
			t("tall.png", 5, 0, 15, 10, "Tree"),
			t("tall.png", 30, 30, 40, 40, "Bird"),
			t("empty_ok.png", 0, 0, 0, 0, "Tree"),
			t("empty_fp.png", 0, 0, 0, 0, "Tree"),
			t("tie.png", 0, 0, 10, 10, "Tree"), // equal intersections: tie rule decides
			t("tie.png", 10, 0, 20, 10, "Tree"),
		},
		pred: []row{
			pr("iou_exactly_04.png", 0, 0, 4, 10, "Tree", 0.9),
			pr("iou_above_04.png", 0, 0, 4.1, 10, "Tree", 0.8),
			pr("touching.png", 10, 0, 20, 10, "Tree", 0.7),
			pr("compete.png", 1, 0, 11, 10, "Tree", 0.6),
			pr("compete.png", 0, 0, 10, 9, "Bird", 0.95),
			pr("zero_area.png", 5, 5, 5, 15, "Tree", 0.5),
			pr("zero_area.png", 21, 21, 41, 41, "Bird", 0.4),
			pr("tall.png", 2, 0, 12, 10, "Tree", 0.3),
			pr("empty_fp.png", 1, 1, 5, 5, "Tree", 0.2),
			pr("tie.png", 5, 0, 15, 10, "Tree", 0.1),
			pr("tie.png", 5, 0, 15, 10, "Bird", 0.15),
		},
	}
}

// three is a 3-image set for runs with more ranks than images.
func three() set {
	return set{
		name: "three",
		truth: []row{
			{"a.png", 0, 0, 10, 10, "Tree", 0}, {"a.png", 20, 20, 30, 30, "Tree", 0},
			{"b.png", 0, 0, 0, 0, "Tree", 0},
			{"c.png", 5, 5, 50, 50, "Tree", 0},
		},
		pred: []row{
			{"a.png", 1, 1, 10, 10, "Tree", 0.9},
			{"c.png", 5, 5, 45, 50, "Tree", 0.8}, {"c.png", 60, 60, 70, 70, "Tree", 0.3},
		},
	}
}

// bench is a large set for benchmarks: n images of exactly k truth boxes,
// the first of each image's d predictions (default k+1) jittered copies of
// the truth and the rest spurious; float32-exact coordinates and scores, as
// a model would write them; labels cycle over c classes.
func bench(n, k, d, c int) set {
	if d <= 0 {
		d = k + 1
	}
	labels := []string{"Tree", "Dead", "Snag", "Bird"}[:min(max(c, 1), 4)]
	rng := rand.New(rand.NewPCG(uint64(n), uint64(k)))
	f := func(v float64) float64 { return float64(float32(v)) }
	s := set{}
	for i := 0; i < n; i++ {
		path := fmt.Sprintf("2019_BENCH_3_%06d_image_%05d.tif", 257000+i%1000, i)
		var truth []row
		for j := 0; j < k; j++ {
			w, h := 8+rng.Float64()*40, 8+rng.Float64()*40
			x, y := rng.Float64()*(400-w), rng.Float64()*(400-h)
			truth = append(truth, row{path, float64(int(x)), float64(int(y)), float64(int(x + w)), float64(int(y + h)), labels[(i+j)%len(labels)], 0})
		}
		s.truth = append(s.truth, truth...)
		for j := 0; j < d; j++ {
			if j < k {
				t := truth[j]
				jit := func(v float64) float64 { return f(clamp(v+rng.NormFloat64()*3, 0, 400)) }
				p := row{path: path, label: t.label, score: f(rng.Float64())}
				p.xmin, p.ymin = jit(t.xmin), jit(t.ymin)
				p.xmax, p.ymax = max(p.xmin, jit(t.xmax)), max(p.ymin, jit(t.ymax))
				s.pred = append(s.pred, p)
				continue
			}
			x, y := f(rng.Float64()*360), f(rng.Float64()*360)
			s.pred = append(s.pred, row{path, x, y, f(x + 20), f(y + 20), labels[j%len(labels)], f(rng.Float64() * 0.3)})
		}
	}
	return s
}

// coco holds the cases COCO evaluation turns on: areas exactly on the
// 32² and 96² bounds, tiny, medium and large boxes, equal scores, images
// without predictions, empty frames with and without predictions, several
// classes, a class only predicted and a class only in the truth.
func coco() set {
	s := set{name: "coco"}
	rng := rand.New(rand.NewPCG(77, 78))
	labels := []string{"Alive", "Dead", "Snag"}
	sizes := [][2]float64{{32, 32}, {96, 96}, {16, 64}, {48, 192}, {5, 7}, {31, 33}, {97, 95}, {150, 120}, {40, 40}, {12, 12}}
	for i := 0; i < 40; i++ {
		path := fmt.Sprintf("coco_%02d.png", i)
		if i%13 == 7 {
			s.truth = append(s.truth, row{path: path, label: labels[0]})
			if i == 7 {
				s.pred = append(s.pred, row{path, 10, 10, 42, 42, labels[1], 0.5})
			}
			continue
		}
		nt := 2 + rng.IntN(6)
		var truth []row
		for k := 0; k < nt; k++ {
			sz := sizes[rng.IntN(len(sizes))]
			x, y := float64(rng.IntN(int(400-sz[0]))), float64(rng.IntN(int(400-sz[1])))
			l := labels[rng.IntN(2)] // "Snag" is only ever predicted
			truth = append(truth, row{path, x, y, x + sz[0], y + sz[1], l, 0})
		}
		s.truth = append(s.truth, truth...)
		if i%9 == 4 {
			continue // no predictions
		}
		for _, t := range truth {
			if rng.Float64() < 0.2 {
				continue
			}
			dx, dy := float64(rng.IntN(7)-3), float64(rng.IntN(7)-3)
			score := float64(rng.IntN(5)) / 4 // few distinct scores: ties
			l := t.label
			if rng.Float64() < 0.1 {
				l = labels[2]
			}
			s.pred = append(s.pred, row{path, max(0, t.xmin+dx), max(0, t.ymin+dy), t.xmax + dx, t.ymax + dy, l, float64(float32(0.1 + 0.8*score))})
		}
		for k := rng.IntN(3); k > 0; k-- {
			x, y := float64(rng.IntN(350)), float64(rng.IntN(350))
			s.pred = append(s.pred, row{path, x, y, x + 30, y + 30, labels[rng.IntN(3)], 0.5})
		}
	}
	return s
}
