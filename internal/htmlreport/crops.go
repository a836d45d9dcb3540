package htmlreport

import (
	"fmt"
	"html/template"
	"io"
)

// Crops is eval-crops' page: the validation table, the confusion matrix
// and the misclassified crops.
type Crops struct {
	Title string
	// Metrics are the table's rows in report.json's order (key, value as
	// written there).
	Metrics [][2]string
	// Labels name the classes by id; Confusion[t][p] counts the crops of
	// target t predicted p.
	Labels    []string
	Confusion [][]int64
	// Wrong lists misclassified crops (path, target, prediction, score),
	// at most MaxWrong of them, in crop order; WrongTotal counts them all.
	Wrong      [][4]string
	WrongTotal int
	// Run are the run table's rows; Notes are printed under the title.
	Run   [][2]string
	Notes []string
}

// MaxWrong bounds the misclassified crops the page lists.
const MaxWrong = 200

type cropCell struct {
	N     int64
	Style template.CSS
}

type cropRow struct {
	Label                   string
	Cells                   []cropCell
	Support                 int64
	Recall, PrecisionString string
}

var cropsTmpl = template.Must(template.New("crops").Parse(pageHead + `
.confusion td { text-align: right; min-width: 2.5em; font-family: ui-monospace, Menlo, Consolas, monospace; }
.confusion th.corner { font-weight: normal; font-size: 12px; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<nav><a href="#metrics">metrics</a><a href="#confusion">confusion matrix</a><a href="#wrong">misclassified</a><a href="#run">run</a></nav>
{{range .Notes}}<p class="note">{{.}}</p>{{end}}
<h2 id="metrics">Metrics</h2>
<table class="metrics"><tr><th>Validate metric</th><th>DataLoader 0</th></tr>
{{range .Metrics}}<tr><td>{{index . 0}}</td><td>{{index . 1}}</td></tr>
{{end}}</table>
<h2 id="confusion">Confusion matrix</h2>
<table class="confusion"><tr><th class="corner">truth ↓ · predicted →</th>{{range .Labels}}<th>{{.}}</th>{{end}}<th>crops</th><th>accuracy</th><th>precision</th></tr>
{{range .Rows}}<tr><th>{{.Label}}</th>{{range .Cells}}<td style="{{.Style}}">{{.N}}</td>{{end}}<td>{{.Support}}</td><td>{{.Recall}}</td><td>{{.PrecisionString}}</td></tr>
{{end}}</table>
<p style="max-width:900px">Rows are the crops' true classes, columns the classes the model predicts (the argmax of its logits); a cell's shade is its share of the row. Accuracy is the row's diagonal over the row (torchmetrics' per-class accuracy, DeepForest's "Class Accuracy"), precision the diagonal over the column; "–" where the row or column is empty.</p>
<h2 id="wrong">Misclassified crops</h2>
{{if .Wrong}}<p>{{.WrongTotal}} crops{{if gt .WrongTotal (len .Wrong)}}, the first {{len .Wrong}} listed{{end}}; crops.csv has every crop.</p>
<table><tr><th>crop</th><th>truth</th><th>predicted</th><th>score</th></tr>
{{range .Wrong}}<tr><td>{{index . 0}}</td><td>{{index . 1}}</td><td>{{index . 2}}</td><td class="num">{{index . 3}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
<section class="run-record">
<h2 id="run">Run</h2>
<table>{{range .Run}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>
{{end}}</table>
</section>
</body>
</html>
`))

// WriteCrops writes eval-crops' page.
func WriteCrops(w io.Writer, c Crops) error {
	k := len(c.Labels)
	if len(c.Confusion) != k {
		return fmt.Errorf("htmlreport: %d labels, %d confusion rows", k, len(c.Confusion))
	}
	col := make([]int64, k)
	for _, r := range c.Confusion {
		if len(r) != k {
			return fmt.Errorf("htmlreport: a confusion row of %d, not %d", len(r), k)
		}
		for p, n := range r {
			col[p] += n
		}
	}
	rows := make([]cropRow, k)
	for t, r := range c.Confusion {
		row := cropRow{Label: c.Labels[t], Cells: make([]cropCell, k), Recall: "–", PrecisionString: "–"}
		for _, n := range r {
			row.Support += n
		}
		for p, n := range r {
			row.Cells[p].N = n
			if row.Support > 0 && n > 0 {
				a := 0.15 + 0.75*float64(n)/float64(row.Support)
				hue := "0,112,60" // the diagonal: green; the rest: red
				if p != t {
					hue = "176,0,32"
				}
				row.Cells[p].Style = template.CSS(fmt.Sprintf("background: rgba(%s,%.2f)", hue, a))
			}
		}
		if row.Support > 0 {
			row.Recall = fmt.Sprintf("%.4f", float64(r[t])/float64(row.Support))
		}
		if col[t] > 0 {
			row.PrecisionString = fmt.Sprintf("%.4f", float64(r[t])/float64(col[t]))
		}
		rows[t] = row
	}
	return cropsTmpl.Execute(w, struct {
		Crops
		Rows []cropRow
	}{c, rows})
}
