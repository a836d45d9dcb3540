package limits

import (
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// The estimate grows with the image and the network input; the default
// budget is the node's memory.
func TestMemoryEstimateAndBudget(t *testing.T) {
	a := MemoryEstimate(0, 1000, 1000, 416, 416, 2)
	if want := int64(2*20*1000*1000 + 400*416*416); a != want {
		t.Fatalf("estimate %d, want %d", a, want)
	}
	if b := MemoryEstimate(0, 2000, 2000, 416, 416, 2); b <= a {
		t.Fatal("a larger image must need more")
	}
	n, src, err := NodeMemory()
	if err != nil || n < 64<<20 || src == "" {
		t.Fatalf("node memory %d (%s): %v", n, src, err)
	}
	for s, want := range map[string]int64{"512M": 512 << 20, "4GiB": 4 << 30, "1.5G": 3 << 29, "1000": 1000, "2k": 2048} {
		if got, err := ParseBytes(s); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "x", "-1G", "1e30T", "NaN"} {
		if _, err := ParseBytes(s); err == nil {
			t.Errorf("parseBytes(%q) accepted", s)
		}
	}
}

// The memory budget reads the limit Slurm puts on the job's or the step's
// cgroup, the lowest on the way up (cgroup v2 and v1), not the root's
// alone.
func TestCgroupMemoryLimitFollowsOwnCgroup(t *testing.T) {
	sys := t.TempDir()
	write := func(rel, v string) {
		p := filepath.Join(sys, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("memory.max", "max")
	write("system.slice/slurmstepd.scope/job_7/memory.max", "2147483648")
	write("system.slice/slurmstepd.scope/job_7/step_0/memory.max", "max")
	write("memory/memory.limit_in_bytes", "9223372036854771712")
	write("memory/slurm/uid_0/job_8/memory.limit_in_bytes", "1073741824")
	write("memory/slurm/uid_0/job_8/step_0/memory.limit_in_bytes", "3221225472")
	for _, c := range []struct {
		cgroup string
		want   int64
		file   string
	}{
		{"0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n", 2 << 30, "system.slice/slurmstepd.scope/job_7/memory.max"},
		{"0::/\n", 0, ""},
		{"4:memory:/slurm/uid_0/job_8/step_0\n0::/\n", 1 << 30, "memory/slurm/uid_0/job_8/memory.limit_in_bytes"},
		{"5:cpu,memory:/slurm/uid_0/job_8/step_0\n", 1 << 30, "memory/slurm/uid_0/job_8/memory.limit_in_bytes"},
		{"", 9223372036854771712, "memory/memory.limit_in_bytes"},
	} {
		n, from := CgroupMemoryLimit(sys, []byte(c.cgroup))
		if want := filepath.Join(sys, c.file); n != c.want || (c.file != "" && from != want) {
			t.Errorf("%q: %d from %s, want %d from %s", c.cgroup, n, from, c.want, want)
		}
	}
}

// --rank-memory is the budget as given, said so.
func TestRankBudgetGiven(t *testing.T) {
	b, from, ok := RankBudget(modelsel.ModelConfig{RankMemory: 3 << 30}, 8)
	if !ok || b != 3<<30 || from != "--rank-memory" {
		t.Fatalf("%d %q %v", b, from, ok)
	}
	b1, _, ok1 := RankBudget(modelsel.ModelConfig{}, 1)
	b4, from, ok4 := RankBudget(modelsel.ModelConfig{}, 4)
	if !ok1 || !ok4 || b4 != b1/4 || !strings.HasSuffix(from, "over 4 rank(s) of this node") {
		t.Fatalf("the node's share: %d of %d, %q", b4, b1, from)
	}
	if GiB(3<<29) != "1.50 GiB" || GiB(1<<30) != "1.00 GiB" || GiB(3<<19) != "1.5 MiB" {
		t.Fatalf("GiB: %s, %s, %s", GiB(3<<29), GiB(1<<30), GiB(3<<19))
	}
}

// onRanks runs f on n in-process ranks; every rank must return want's code.
func onRanks(t *testing.T, n, want int, f func(c mpi.Comm) error) []error {
	t.Helper()
	errs := local.Run(n, f)
	for r, err := range errs {
		if errkind.Code(err) != want {
			t.Errorf("rank %d: %v, want exit %d", r, err, want)
		}
	}
	return errs
}

// The metrics' memory check is collective: over the budget every rank
// fails alike with exit 3 naming the stage; within it none does.
func TestCheckMetrics(t *testing.T) {
	im := box.Image{Path: "a.png"}
	var dets []box.Detection
	for k := 0; k < 50; k++ {
		b := box.Box{Xmin: float64(k), Ymin: 0, Xmax: float64(k + 10), Ymax: 10}
		im.Truth = append(im.Truth, box.Truth{Box: b})
		dets = append(dets, box.Detection{Box: b, Score: 0.5})
	}
	in := metrics.Input{Images: []box.Image{im}, Dets: [][]box.Detection{dets}, Labels: box.SortedLabelMap([]string{"Tree"})}
	roomy := modelsel.ModelConfig{RankMemory: 1 << 40}
	onRanks(t, 2, errkind.ExitOK, func(c mpi.Comm) error { return CheckMetrics(c, in, metrics.Recall|metrics.COCOmAP, roomy) })
	// the process already holds more than 1 MiB: every stage is over
	tight := modelsel.ModelConfig{RankMemory: 1 << 20}
	for fam, says := range map[metrics.Family]string{metrics.Recall: "matching 100 boxes over 1 images", metrics.COCOmAP: "the COCO metrics of 1 classes"} {
		errs := onRanks(t, 2, errkind.ExitInput, func(c mpi.Comm) error { return CheckMetrics(c, in, fam, tight) })
		for r, err := range errs {
			if !strings.Contains(fmt.Sprint(err), says) {
				t.Errorf("family %v, rank %d: %v, want it to say %q", fam, r, err, says)
			}
		}
	}
}

// Pre-flight of the paths alone (no model): confinement and the pixel cap,
// agreed by every rank.
func TestPreflightPaths(t *testing.T) {
	root := t.TempDir()
	f, err := os.Create(filepath.Join(root, "a.png"))
	if err != nil {
		t.Fatal(err)
	}
	png.Encode(f, image.NewRGBA(image.Rect(0, 0, 30, 20)))
	f.Close()
	run := func(paths []string, outside bool, cap int64, want int, says string) {
		t.Helper()
		mc := modelsel.ModelConfig{MaxImagePixels: cap}
		// rank 0 checks a.png alone, rank 1 the paths: rank 1's error
		// must reach rank 0
		mine := func(r int) []string { return [][]string{{"a.png"}, paths}[r] }
		for r, err := range onRanks(t, 2, want, func(c mpi.Comm) error { return Preflight(c, root, mine(c.Rank()), outside, nil, mc, 1) }) {
			if !strings.Contains(fmt.Sprint(err), says) {
				t.Errorf("%v cap %d, rank %d: %v, want it to say %q", paths, cap, r, err, says)
			}
		}
	}
	run([]string{"a.png"}, false, 600, errkind.ExitOK, "<nil>")
	run([]string{"a.png"}, false, 599, errkind.ExitInput, "rank 0: jobs: pre-flight: "+filepath.Join(root, "a.png")+": 30x20 is 600 pixels, over the limit of 599")
	run([]string{"a.png"}, false, 0, errkind.ExitOK, "<nil>")
	run([]string{"../a.png"}, false, 0, errkind.ExitInput, `rank 1: jobs: pre-flight: image "../a.png": a ".." element`)
	run([]string{"missing.png"}, false, 0, errkind.ExitInput, "rank 1: jobs: pre-flight: ")
}
