package cuda

import "testing"

func TestParseDevice(t *testing.T) {
	for in, want := range map[string]Request{
		"auto": {"auto", -1}, "cpu": {"cpu", -1}, "cuda": {"cuda", -1}, "gpu": {"cuda", -1}, "cuda:3": {"cuda", 3},
	} {
		got, err := ParseDevice(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"cuda:", "cuda:-1", "cuda:x", "tpu", "CUDA"} {
		if _, err := ParseDevice(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// A 4-GPU node under mpirun -np 4: each rank its own device; -np 8 on it:
// two per device; srun --gpus-per-task=1: every rank sees one device 0.
func TestPlace(t *testing.T) {
	cuda := Request{"cuda", -1}
	auto := Request{"auto", -1}
	for _, c := range []struct {
		req                 Request
		rank, size, visible int
		have                bool
		kind                string
		index, sharing      int
	}{
		{cuda, 0, 4, 4, true, "cuda", 0, 1},
		{cuda, 3, 4, 4, true, "cuda", 3, 1},
		{auto, 2, 4, 4, true, "cuda", 2, 1},
		{cuda, 5, 8, 4, true, "cuda", 1, 2},
		{cuda, 2, 3, 2, true, "cuda", 0, 2}, // ranks 0 and 2 on device 0
		{cuda, 1, 3, 2, true, "cuda", 1, 1},
		{cuda, 3, 4, 1, true, "cuda", 0, 4}, // one device visible to 4 ranks: all four share it
		{Request{"cuda", 1}, 0, 2, 2, true, "cuda", 1, 2},
		{auto, 0, 2, 0, true, "cpu", -1, 1},
		{auto, 0, 2, 4, false, "cpu", -1, 1},
		{Request{"cpu", -1}, 0, 2, 4, true, "cpu", -1, 1},
	} {
		p, err := Place(c.req, c.rank, c.size, c.visible, c.have)
		if err != nil || p.Kind != c.kind || p.Index != c.index || p.Sharing != c.sharing {
			t.Errorf("%+v: %+v, %v", c, p, err)
		}
	}
	for _, c := range []struct {
		req                 Request
		rank, size, visible int
		have                bool
	}{
		{cuda, 0, 1, 0, true},               // no device visible
		{cuda, 0, 1, 4, false},              // no cuda build
		{Request{"cuda", 2}, 0, 1, 2, true}, // index out of range
		{cuda, 4, 4, 4, true},               // bad local rank
	} {
		if p, err := Place(c.req, c.rank, c.size, c.visible, c.have); err == nil {
			t.Errorf("%+v: placed %+v", c, p)
		}
	}
}

func TestVisible(t *testing.T) {
	for _, c := range []struct {
		v     string
		set   bool
		total int
		want  int
	}{
		{"", false, 4, 4},
		{"", true, 4, 0},
		{"0", true, 4, 1},   // srun --gpus-per-task=1
		{"2,3", true, 4, 2}, // Slurm's binding of a 2-GPU task
		{" 3 , 1", true, 4, 2},
		{"0,7,1", true, 4, 1},
		{"-1", true, 4, 0},
		{"GPU-5d0c1a7e-aaaa-bbbb-cccc-0123456789ab,1", true, 4, 2},
		{"1,1", true, 4, 1},
		{"NoDevFiles", true, 4, 0},
	} {
		if got := len(Visible(c.v, c.set, c.total)); got != c.want {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q (set %v) of %d: %d, want %d", c.v, c.set, c.total, got, c.want)
		}
	}
}

// Entry i of the list is the process's device i.
func TestVisibleOrder(t *testing.T) {
	if got := Visible("3,1", true, 4); len(got) != 2 || got[0] != "3" || got[1] != "1" {
		t.Errorf("3,1: %q", got)
	}
	if got := Visible("", false, 2); len(got) != 2 || got[0] != "0" || got[1] != "1" {
		t.Errorf("unset: %q", got)
	}
}
