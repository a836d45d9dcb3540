package jobs

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	stdhtml "html"
	"image"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// runSpecific matches the page's blocks about the run itself (ranks, hosts,
// seconds, command): the rest of report.html is the same for any rank count.
var runSpecific = regexp.MustCompile(`(?s)<section class="run-record">.*?</section>`)

// hostileRaster is a raster file name with HTML's special characters.
const hostileRaster = `r<b>&"x'.png`

// TestEvalTileHTML: eval --tile writes report.html with the set, at 1 and 3
// ranks the same bytes outside its two run blocks: eval's metrics table
// (report.json's values), the PR curves, and --html-worst windows of the
// raster drawn at --html-thumb, with the raster's name escaped; the page
// passes the browser's self-check.
func TestEvalTileHTML(t *testing.T) {
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no raster reads")
	}
	chromium := findChromium(t)
	dir := t.TempDir()
	cmd := exec.Command("go", "run", "./cmd/forestgen", "-out", dir, "-n", "1", "-sizes", "640x560", "-seed", "11")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("forestgen: %v\n%s", err, out)
	}
	if err := os.Rename(filepath.Join(dir, "img_0000.png"), filepath.Join(dir, hostileRaster)); err != nil {
		t.Fatal(err)
	}
	ann, _ := os.ReadFile(filepath.Join(dir, "annotations.csv"))
	quoted := `"` + strings.ReplaceAll(hostileRaster, `"`, `""`) + `"`
	truth := filepath.Join(dir, "truth.csv")
	os.WriteFile(truth, bytes.ReplaceAll(ann, []byte("img_0000.png"), []byte(quoted)), 0o644)

	one := func(c mpi.Comm) func() (mpi.Comm, func() error, error) {
		return func() (mpi.Comm, func() error, error) { return c, func() error { return nil }, nil }
	}
	const worst, thumb = 5, 160
	run := func(n int) string {
		out := filepath.Join(t.TempDir(), "out")
		var stderr bytes.Buffer
		lw := &lockedWriter{w: &stderr}
		codes := make([]int, n)
		args := []string{"canopy", "eval", "--csv", truth, "--tile", "--model", demoModelDir, "--threads", "1", "--patch-size", "300",
			"--patch-overlap", "0.15", "--html-worst", fmt.Sprint(worst), "--html-thumb", fmt.Sprint(thumb), "--out", out}
		local.Run(n, func(c mpi.Comm) error {
			codes[c.Rank()] = MainWith(context.Background(), args, &bytes.Buffer{}, lw, one(c))
			return nil
		})
		for r, code := range codes {
			if code != 0 {
				t.Fatalf("%d ranks: rank %d exit %d\n%s", n, r, code, stderr.String())
			}
		}
		return out
	}
	var ref []byte
	var refOut string
	for _, n := range []int{1, 3} {
		out := run(n)
		page, err := os.ReadFile(filepath.Join(out, "report.html"))
		if err != nil {
			t.Fatalf("%d ranks: %v", n, err)
		}
		if k := len(runSpecific.FindAll(page, -1)); k != 2 {
			t.Fatalf("%d ranks: %d run blocks, want 2 (timeline, run table)", n, k)
		}
		body := runSpecific.ReplaceAll(page, nil)
		if ref == nil {
			ref, refOut = body, out
			continue
		}
		if !bytes.Equal(body, ref) {
			a, b := string(ref), string(body)
			i := 0
			for i < len(a) && i < len(b) && a[i] == b[i] {
				i++
			}
			t.Fatalf("%d ranks: report.html differs from 1 rank's at byte %d:\n%.300s\n%.300s", n, i, a[i:], b[i:])
		}
	}

	page, _ := os.ReadFile(filepath.Join(refOut, "report.html"))
	s := string(page)
	// eval's metrics table: report.json's metrics, in order, as written.
	var rep struct {
		Metrics json.RawMessage `json:"metrics"`
		Tile    struct {
			Windows int `json:"windows"`
		} `json:"tile"`
	}
	rj, _ := os.ReadFile(filepath.Join(refOut, "report.json"))
	if err := json.Unmarshal(rj, &rep); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(rep.Metrics, &m)
	for _, k := range []string{"box_recall", "box_precision", "map"} {
		v, _ := json.Marshal(m[k])
		if row := fmt.Sprintf("<tr><td>%s</td><td>%s</td></tr>", k, v); !strings.Contains(s, row) {
			t.Errorf("no metrics row %s", row)
		}
	}
	d, err := htmlreport.ReadData(page)
	if err != nil || d == nil {
		t.Fatalf("data block: %v %v", d, err)
	}
	if len(d.PR) < 2 || d.Images != worst || rep.Tile.Windows != 9 {
		t.Fatalf("%d PR curves, %d windows drawn, %d windows: want ≥ 2, %d, 9", len(d.PR), d.Images, rep.Tile.Windows, worst)
	}
	// The windows drawn: JPEG crops of the 300×300 windows, longer side --html-thumb.
	uris := regexp.MustCompile(`src="data:image/jpeg;base64,([^"]+)"`).FindAllSubmatch(page, -1)
	if len(uris) != worst {
		t.Fatalf("%d images, want %d", len(uris), worst)
	}
	for _, u := range uris {
		b, err := base64.StdEncoding.DecodeString(stdhtml.UnescapeString(string(u[1])))
		if err != nil {
			t.Fatal(err)
		}
		c, _, err := image.DecodeConfig(bytes.NewReader(b))
		if err != nil || c.Width != thumb || c.Height != thumb {
			t.Fatalf("thumbnail %dx%d (%v), want %dx%d", c.Width, c.Height, err, thumb, thumb)
		}
	}
	if n := strings.Count(s, " truth boxes missed, "); n != worst {
		t.Fatalf("%d window captions, want %d", n, worst)
	}
	if strings.Contains(s, "<b>&") || !strings.Contains(s, "r&lt;b&gt;&amp;&#34;x&#39;.png") {
		t.Fatal("the raster's name is not escaped on the page")
	}
	if strings.Contains(s, "window not drawn (") {
		t.Fatal("a window was not read")
	}

	dom, console := browse(t, chromium, filepath.Join(refOut, "report.html"))
	if len(console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(console, "\n"))
	}
	if got := domAttr(dom, "data-check"); got != "ok" {
		t.Errorf("page check: %q", got)
	}
	if got := domAttr(dom, "data-images"); got != fmt.Sprint(worst) {
		t.Errorf("%s images in the DOM, want %d", got, worst)
	}
}
