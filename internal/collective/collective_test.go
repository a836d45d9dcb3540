package collective

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// unset removes the variables for this test (t.Setenv restores them).
func unset(t *testing.T, keys ...string) {
	for _, k := range keys {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

// onRanks runs f on n in-process ranks and returns each rank's error.
func onRanks(t *testing.T, n int, f func(c mpi.Comm) error) []error {
	t.Helper()
	return local.Run(n, f)
}

func TestPacketRoundTrip(t *testing.T) {
	fields := [][]byte{[]byte("truth.csv bytes"), {}, []byte{0, 1, 2}}
	pkt := PackFields([]byte{0}, fields...)
	got, err := UnpackPacket(pkt, 3)
	if err != nil || len(got) != 3 {
		t.Fatalf("%d fields, %v", len(got), err)
	}
	for i := range fields {
		if !bytes.Equal(got[i], fields[i]) {
			t.Fatalf("field %d: %q, want %q", i, got[i], fields[i])
		}
	}
	for _, c := range []struct {
		name string
		pkt  []byte
		min  int
	}{
		{"empty", nil, 0},
		{"too few fields", pkt, 4},
		{"truncated length", pkt[:5], 0},
		{"truncated field", pkt[:len(pkt)-1], 0},
	} {
		_, err := UnpackPacket(c.pkt, c.min)
		if e := (*errkind.Error)(nil); !errors.As(err, &e) || e.Code != errkind.ExitInternal || !e.Collective {
			t.Errorf("%s: %v, want a collective internal error", c.name, err)
		}
	}
	// rank 0's error travels as its code and text
	_, err = UnpackPacket(append([]byte{errkind.ExitInput}, "bad csv"...), 0)
	if e := (*errkind.Error)(nil); !errors.As(err, &e) || e.Code != errkind.ExitInput || e.Error() != "bad csv" {
		t.Fatalf("error packet: %v", err)
	}
}

// Every rank gets rank 0's fields, or rank 0's error.
func TestBcastFields(t *testing.T) {
	errs := onRanks(t, 3, func(c mpi.Comm) error {
		var pkt []byte
		if c.Rank() == 0 {
			pkt = PackFields([]byte{0}, []byte("a"), []byte("bc"))
		}
		f, err := BcastFields(c, pkt, 2)
		if err != nil || string(bytes.Join(f, []byte("|"))) != "a|bc" {
			return fmt.Errorf("fields %q, %v", f, err)
		}
		if c.Rank() == 0 {
			pkt = append([]byte{errkind.ExitInput}, "bad"...)
		}
		if _, err := BcastFields(c, pkt, 0); errkind.Code(err) != errkind.ExitInput {
			return fmt.Errorf("error packet: %v", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// AgreeErr: the same outcome on every rank, naming the first failing rank,
// with the largest code any rank proposed.
func TestAgreeErr(t *testing.T) {
	got := make([]error, 4)
	errs := onRanks(t, 4, func(c mpi.Comm) error {
		var err error
		switch c.Rank() {
		case 1:
			err = errkind.Local(errkind.ExitModel, "no weights")
		case 3:
			err = errors.New("disk full") // proposes ExitInput, below rank 1's
		}
		if e := AgreeErr(c, errkind.ExitInput, nil); e != nil {
			return fmt.Errorf("no rank failed, yet %v", e)
		}
		got[c.Rank()] = AgreeErr(c, errkind.ExitInput, err)
		return nil
	})
	for r := range errs {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		e := (*errkind.Error)(nil)
		if !errors.As(got[r], &e) || !e.Collective || e.Code != errkind.ExitModel ||
			e.Error() != "rank 1: no weights (and 1 more ranks failed)" {
			t.Errorf("rank %d: %#v (%v), want a collective exit 4 naming rank 1", r, got[r], got[r])
		}
	}
}

// Agree: equal metric bytes pass; a rank whose digest differs fails every
// rank with exit 6, naming it.
func TestAgree(t *testing.T) {
	check := func(perturb string) []error {
		t.Setenv(testhook.PerturbEnv, perturb)
		return onRanks(t, 3, func(c mpi.Comm) error { return Agree(c, []byte(`{"box_recall":0.5}`)) })
	}
	for r, err := range check("") {
		if err != nil {
			t.Fatalf("rank %d: %v with equal bytes", r, err)
		}
	}
	for r, err := range check("2") {
		if errkind.Code(err) != errkind.ExitDisagree || !strings.Contains(fmt.Sprint(err), "ranks [2] differ from rank 0") {
			t.Errorf("rank %d: %v, want exit 6 naming rank 2", r, err)
		}
	}
}

// FinalStatus: rank 0's write error reaches every rank.
func TestFinalStatus(t *testing.T) {
	for _, fail := range []bool{false, true} {
		errs := onRanks(t, 3, func(c mpi.Comm) error {
			var werr error
			if fail && c.Rank() == 0 {
				werr = errors.New("no space left")
			}
			return FinalStatus(c, werr, "report")
		})
		for r, err := range errs {
			switch {
			case !fail && err != nil:
				t.Errorf("rank %d: %v with nothing failed", r, err)
			case fail && (errkind.Code(err) != errkind.ExitInternal || !strings.HasPrefix(fmt.Sprint(err), "jobs: write report: ")):
				t.Errorf("rank %d: %v, want exit 1 'jobs: write report: …'", r, err)
			}
		}
	}
}

// The launcher's size against MPI's: a mismatch is exit 5 with the
// variable's name; Slurm's counts only inside a step.
func TestCheckLauncher(t *testing.T) {
	unset(t, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
	c := local.New(1)[0]
	if err := CheckLauncher(c); err != nil {
		t.Fatalf("no launcher variables: %v", err)
	}
	t.Setenv("SLURM_NTASKS", "4")
	if err := CheckLauncher(c); err != nil {
		t.Fatalf("SLURM_NTASKS outside a step: %v", err)
	}
	t.Setenv("SLURM_STEP_ID", "0")
	err := CheckLauncher(c)
	if errkind.Code(err) != errkind.ExitMPI || !strings.Contains(err.Error(), "(SLURM_NTASKS)") || !strings.Contains(err.Error(), "--mpi=pmix") {
		t.Fatalf("a 1-rank MPI in a 4-task step: %v", err)
	}
	t.Setenv("PMI_SIZE", "1")
	if err := CheckLauncher(c); err != nil {
		t.Fatalf("PMI_SIZE=1 (read before Slurm's): %v", err)
	}
}

// SayLine escapes what a terminal would act on: one line per message.
func TestSayLine(t *testing.T) {
	var b bytes.Buffer
	SayLine(&b, "canopy: ", "image \"a\nb\x1b[2J\"")
	if s := b.String(); strings.Count(s, "\n") != 1 || strings.ContainsRune(s, 0x1b) || !strings.HasPrefix(s, "canopy: image") {
		t.Fatalf("%q", s)
	}
}

// GatherMerge: every rank's detections, plus the resumed images every
// rank holds (one without losses, one with), land at their global index,
// the same on every rank; an image sent twice, or one missing, is a
// collective internal error.
func TestGatherMerge(t *testing.T) {
	det := func(i int) []box.Detection { return []box.Detection{{Score: float64(i) / 8, Label: int32(i % 2)}} }
	run := func(extra map[int][]int, n int) ([][][]box.Detection, []error) {
		got := make([][][]box.Detection, 3)
		errs := onRanks(t, 3, func(c mpi.Comm) error {
			var mine []wire.Image
			for i := c.Rank(); i < 4; i += 3 { // images 0..3 dealt; 4 and 5 resumed
				mine = append(mine, wire.Image{Index: i, Dets: det(i)})
			}
			for _, i := range extra[c.Rank()] {
				mine = append(mine, wire.Image{Index: i, Dets: det(i)})
			}
			st := RankStats{Seconds: map[string]float64{}}
			prev := []wire.Image{{Index: 4, Dets: det(4)}, {Index: 5, Dets: det(5), Loss: &box.Loss{Classification: 0.25, BoxRegression: 0.5}}}
			dets, losses, err := GatherMerge(c, 0, 0, mine, prev, n, &st)
			if err == nil && (st.BytesSent == 0 || st.Seconds["gather"] <= 0) {
				err = fmt.Errorf("stats %+v", st)
			}
			if err == nil && (losses[4] != nil || losses[5] == nil || *losses[5] != *prev[1].Loss) {
				err = fmt.Errorf("losses of the resumed images: %v, %v", losses[4], losses[5])
			}
			got[c.Rank()] = dets
			return err
		})
		return got, errs
	}
	got, errs := run(nil, 6)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		for i := range 6 {
			if fmt.Sprint(got[r][i]) != fmt.Sprint(det(i)) {
				t.Fatalf("rank %d, image %d: %v, want %v", r, i, got[r][i], det(i))
			}
		}
	}
	for name, c := range map[string]struct {
		extra map[int][]int
		n     int
	}{"image 0 twice": {map[int][]int{2: {0}}, 6}, "image 6 missing": {nil, 7}} {
		_, errs := run(c.extra, c.n)
		for r, err := range errs {
			if e := (*errkind.Error)(nil); !errors.As(err, &e) || e.Code != errkind.ExitInternal || !e.Collective {
				t.Errorf("%s, rank %d: %v, want a collective internal error", name, r, err)
			}
		}
	}
}

// WriteReport: rank 0 writes with every rank's statistics in rank order;
// its failure is every rank's.
func TestWriteReport(t *testing.T) {
	for _, fail := range []bool{false, true} {
		var ranks []int
		writer := -1
		errs := onRanks(t, 3, func(c mpi.Comm) error {
			return WriteReport(c, RankStats{Rank: c.Rank(), Images: 10 * c.Rank()}, "report.json", func(all []RankStats) error {
				writer = c.Rank()
				for _, s := range all {
					ranks = append(ranks, s.Rank, s.Images)
				}
				if fail {
					return errors.New("disk full")
				}
				return nil
			})
		})
		if writer != 0 || fmt.Sprint(ranks) != "[0 0 1 10 2 20]" {
			t.Fatalf("rank %d wrote with %v; want rank 0 alone, every rank's stats", writer, ranks)
		}
		for r, err := range errs {
			if (err != nil) != fail || (fail && errkind.Code(err) != errkind.ExitInternal) {
				t.Errorf("fail %v, rank %d: %v", fail, r, err)
			}
		}
	}
}
