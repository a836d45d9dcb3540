package htmlreport

import "html/template"

// selfCheck runs first in the page: it records script errors, console
// errors, images that did not load and plots without a drawn box, and
// when the page has loaded writes the outcome to <html data-check> ("ok"
// or the problems), which the browser test reads from the DOM.
const selfCheck = `(function () {
  var errs = [];
  window.addEventListener("error", function (e) {
    errs.push("error: " + (e.message || (e.target && (e.target.alt || e.target.src || e.target.tagName))));
  }, true);
  var ce = console.error;
  console.error = function () { errs.push("console.error: " + Array.prototype.join.call(arguments, " ")); ce.apply(console, arguments); };
  window.addEventListener("load", function () {
    var imgs = document.querySelectorAll("img"), plots = document.querySelectorAll("svg.plot");
    imgs.forEach(function (im) { if (!im.complete || im.naturalWidth === 0) errs.push("image did not load: " + im.alt); });
    plots.forEach(function (s, i) {
      var b = s.getBBox();
      if (!(b.width > 0 && b.height > 0) || s.querySelectorAll("path").length < 3) errs.push("plot " + i + " did not render");
    });
    var h = document.documentElement;
    h.setAttribute("data-plots", plots.length);
    h.setAttribute("data-images", imgs.length);
    h.setAttribute("data-check", errs.length ? errs.join(" | ") : "ok");
  });
})();`

// pageCSS is the pages' style sheet (the eval page's, eval-crops').
const pageCSS = `body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0 auto; max-width: 1400px; padding: 12px 20px; color: #1a1a1a; }
h1 { font-size: 22px; margin: 6px 0; } h2 { font-size: 17px; margin: 18px 0 6px; border-bottom: 1px solid #ddd; }
nav a { margin-right: 12px; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.metrics td:nth-child(2), .num { text-align: right; font-family: ui-monospace, Menlo, Consolas, monospace; }
.row { display: flex; flex-wrap: wrap; gap: 16px 32px; align-items: flex-start; }
.plots svg { max-width: 100%; height: auto; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr)); gap: 12px; }
figure { margin: 0; border: 1px solid #ddd; padding: 6px; background: #fafafa; }
figure img { width: 100%; height: auto; display: block; }
figcaption { font-size: 12px; word-break: break-all; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 6px; }
.worse { color: #b00020; font-weight: 600; } .better { color: #00703c; } .changed { color: #8a5a00; }
.note { color: #8a5a00; }
.key span { display: inline-block; width: 12px; height: 12px; vertical-align: middle; margin: 0 4px 0 10px; }
pre { white-space: pre-wrap; word-break: break-all; font-size: 12px; background: #f6f6f6; padding: 6px; }
`

// pageHead opens a page: its title, the self-check, the style sheet (a
// page adds its own rules, then closes </style> and </head>).
const pageHead = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<script>` + selfCheck + `</script>
<style>
` + pageCSS

// pageTmpl is the page. The two <section class="run-record"> blocks (the
// per-rank timeline, the run table) describe the run itself: ranks,
// hosts, seconds, the command. Everything else follows from the inputs and
// the results alone, the same bytes for any rank count (tested on eval
// --tile's page).
var pageTmpl = template.Must(template.New("page").Parse(pageHead + `</style>
</head>
<body>
<h1>{{.Title}}</h1>
<nav><a href="#metrics">metrics</a><a href="#pr">PR curves</a>{{if .Hist}}<a href="#scores">scores</a>{{end}}{{if .Sizes}}<a href="#sizes">box sizes</a>{{end}}{{if .Timeline}}<a href="#timeline">timeline</a>{{end}}<a href="#images">images</a><a href="#run">run</a></nav>
{{range .Notes}}<p class="note">{{.}}</p>{{end}}

<div class="row"><section>
<h2 id="metrics">Metrics</h2>
{{if .Compare}}
<table class="metrics"><tr><th>metric</th><th>{{index .Sides 0}}</th><th>{{index .Sides 1}}</th><th>delta</th><th>verdict</th></tr>
{{range .Compare}}<tr><td>{{.Metric}}</td><td class="num">{{.Baseline}}</td><td class="num">{{.Current}}</td><td class="num">{{.Delta}}</td><td class="{{.Verdict}}">{{.Verdict}}{{if .Regression}} (regression){{end}}</td></tr>
{{end}}</table>
{{else}}
<table class="metrics"><tr><th>Validate metric</th><th>DataLoader 0</th></tr>
{{range .Metrics}}<tr><td>{{.Key}}</td><td>{{.Value}}</td></tr>
{{end}}</table>
{{with .Sweep}}<h3 id="sweep">IoU-threshold sweep</h3>
<table class="metrics sweep"><tr><th>metric \ IoU threshold</th>{{range .Thresholds}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr><td>{{.Key}}</td>{{range .Values}}<td class="num">{{.}}</td>{{end}}</tr>
{{end}}</table>{{end}}
{{end}}
</section><section>
<h2 id="pr">Precision–recall curves</h2>
<div class="plots">{{range .PR}}<div>{{.}}</div>{{end}}</div>
</section></div>

<div class="row">
{{if .Hist}}<section><h2 id="scores">Scores of true and false positives</h2>
<div class="plots">{{.Hist}}</div></section>{{end}}
{{if .Sizes}}<section><h2 id="sizes">Recall and precision by box size</h2>
<div class="plots">{{.SizePlot}}</div>
<table><tr><th>size (area, px²)</th><th>truth boxes</th><th>found</th><th>recall</th><th>detections</th><th>matching</th><th>precision</th></tr>
{{range .Sizes}}<tr><td>{{.Name}}</td><td class="num">{{.Truth}}</td><td class="num">{{.Found}}</td><td class="num">{{.RecallText}}</td><td class="num">{{.Dets}}</td><td class="num">{{.Hits}}</td><td class="num">{{.PrecisionText}}</td></tr>
{{end}}</table>
<p style="max-width:560px">A truth box is found, and a detection matches, when DeepForest's one-to-one match gives IoU above the run's threshold (as in results.csv). Sizes are COCO's area ranges.</p></section>{{end}}
</div>

<section class="run-record">
{{if .Timeline}}<h2 id="timeline">Per-rank timeline</h2>
<div class="plots">{{.Timeline}}</div>
<table><tr><th>rank</th><th>host</th>{{with index .Stages 0}}{{range .Stages}}<th>{{.Name}} (s)</th>{{end}}{{end}}<th>total (s)</th></tr>
{{range .Stages}}<tr><td class="num">{{.Rank}}</td><td>{{.Host}}</td>{{range .Stages}}<td class="num">{{printf "%.3f" .Seconds}}</td>{{end}}<td class="num">{{printf "%.3f" .Total}}</td></tr>
{{end}}</table>
<p>Each rank's seconds from report.json, stages in the order a rank runs them (detect includes preflight; gather includes waiting for the slowest rank; write is rank 0's CSVs and report.json).</p>{{end}}
</section>

<h2 id="images">{{if .Pairs}}Images whose recall changed most{{else if .WorstTitle}}{{.WorstTitle}}{{else}}Worst images{{end}}</h2>
{{if .WorstRule}}<p style="max-width:900px">{{.WorstRule}}</p>{{end}}
<p class="key">Boxes:<span style="background:#00e6ff"></span>truth<span style="background:#ff00c8"></span>predictions (score printed)</p>
{{if .Pairs}}<div class="grid" style="grid-template-columns: repeat(auto-fill, minmax(520px, 1fr));">
{{range .Pairs}}<div class="pair">{{range .}}<figure><img src="{{.Src}}" width="{{.W}}" height="{{.H}}" alt="{{.Alt}}"><figcaption><b>{{.Path}}</b><br>{{.Caption}}{{if .Note}}<br><span class="note">{{.Note}}</span>{{end}}</figcaption></figure>{{end}}</div>
{{end}}</div>
{{else}}<div class="grid">
{{range .Worst}}<figure><img src="{{.Src}}" width="{{.W}}" height="{{.H}}" alt="{{.Alt}}"><figcaption><b>{{.Path}}</b><br>{{.Caption}}{{if .Rows}}<br><a href="results.csv">{{.Rows}}</a>{{end}}{{if .Note}}<br><span class="note">{{.Note}}</span>{{end}}</figcaption></figure>
{{else}}<p>None drawn.</p>{{end}}</div>{{end}}

<section class="run-record">
<h2 id="run">Run</h2>
<table>{{range .Run}}<tr><th>{{.K}}</th><td>{{.V}}</td></tr>
{{end}}</table>
</section>
<script type="application/json" id="canopy-data">{{.DataJSON}}</script>
</body>
</html>
`))
