package testhook

import (
	"os"
	"testing"
	"time"
)

// Each hook is inert when its variable is unset, and acts only for the
// rank (and the point) it names.
func TestHooksInertWhenUnset(t *testing.T) {
	for _, v := range []string{PerturbEnv, StopEnv, InterruptEnv, "CANOPY_TILE_DEAL", "CANOPY_TEST_SLOW_MS", StartDelayEnv, ReportDelayEnv, StallFloorEnv} {
		t.Setenv(v, "") // restored after the test
		os.Unsetenv(v)
	}
	if Perturb(0) {
		t.Error("Perturb(0) with CANOPY_TEST_PERTURB_RANK empty")
	}
	if n := InterruptAfter(0); n != -1 {
		t.Errorf("InterruptAfter(0) = %d with CANOPY_TEST_INTERRUPT empty, want -1", n)
	}
	if StaticDeal() || SlowWindow() != 0 {
		t.Errorf("StaticDeal %v, SlowWindow %v with both unset", StaticDeal(), SlowWindow())
	}
	if d := StartDelay(0); d != 0 {
		t.Errorf("StartDelay(0) = %v with %s empty", d, StartDelayEnv)
	}
	if d := ReportDelay(0); d != 0 {
		t.Errorf("ReportDelay(0) = %v with %s empty", d, ReportDelayEnv)
	}
	if d := StallFloor(); d != time.Minute {
		t.Errorf("StallFloor() = %v with %s empty, want 1m", d, StallFloorEnv)
	}
	Stop(0, "gather") // an empty StopEnv names no rank: must return at once
}

// StallFloorEnv replaces the floor only with a positive duration.
func TestStallFloor(t *testing.T) {
	for env, want := range map[string]time.Duration{"5s": 5 * time.Second, "250ms": 250 * time.Millisecond, "0s": time.Minute, "-3s": time.Minute, "5": time.Minute, "x": time.Minute} {
		t.Setenv(StallFloorEnv, env)
		if d := StallFloor(); d != want {
			t.Errorf("%s=%q: StallFloor() = %v, want %v", StallFloorEnv, env, d, want)
		}
	}
}

// "RANK:MS": only that rank waits; a malformed or negative wait is none.
// Both delay hooks read their own variable.
func TestStartDelay(t *testing.T) {
	for _, h := range []struct {
		env   string
		delay func(int) time.Duration
	}{{StartDelayEnv, StartDelay}, {ReportDelayEnv, ReportDelay}} {
		for _, c := range []struct {
			env  string
			rank int
			want time.Duration
		}{
			{"0:1500", 0, 1500 * time.Millisecond}, {"0:1500", 1, 0}, {"1:20", 1, 20 * time.Millisecond},
			{"0:x", 0, 0}, {"0:-5", 0, 0}, {"0", 0, 0},
		} {
			t.Setenv(StartDelayEnv, "0:7") // the other hook's 7 ms must not leak in
			t.Setenv(ReportDelayEnv, "0:7")
			t.Setenv(h.env, c.env)
			if got := h.delay(c.rank); got != c.want {
				t.Errorf("%s=%q: delay of rank %d = %v, want %v", h.env, c.env, c.rank, got, c.want)
			}
		}
	}
}

func TestPerturbNamesOneRank(t *testing.T) {
	t.Setenv(PerturbEnv, "2")
	for r, want := range []bool{false, false, true, false} {
		if Perturb(r) != want {
			t.Errorf("Perturb(%d) = %v with %s=2", r, !want, PerturbEnv)
		}
	}
}

// "RANK:N": only that rank stops after N batches; a malformed count is
// never.
func TestInterruptAfter(t *testing.T) {
	for _, c := range []struct {
		env  string
		rank int
		want int
	}{
		{"1:3", 1, 3}, {"1:3", 0, -1}, {"0:0", 0, 0}, {"1:x", 1, -1}, {"1", 1, -1},
	} {
		t.Setenv(InterruptEnv, c.env)
		if got := InterruptAfter(c.rank); got != c.want {
			t.Errorf("%s=%q: InterruptAfter(%d) = %d, want %d", InterruptEnv, c.env, c.rank, got, c.want)
		}
	}
}

// Stop freezes exactly the rank and point the variable names ("R" alone
// means the gather), and nothing when it is unset.
func TestStopOtherRankOrPoint(t *testing.T) {
	stops := 0
	old := stopSelf
	stopSelf = func() { stops++ }
	defer func() { stopSelf = old }()
	for _, c := range []struct {
		env   string
		unset bool
		rank  int
		at    string
		stop  bool
	}{
		{"1", false, 0, "gather", false}, {"1:gather", false, 0, "gather", false},
		{"0:start", false, 0, "gather", false}, {"0:html", false, 0, "gather", false},
		{"0", false, 0, "gather", true}, {"1", false, 1, "gather", true}, {"1:start", false, 1, "start", true},
		{"0:html", false, 0, "html", true}, {"", true, 0, "gather", false},
	} {
		t.Setenv(StopEnv, c.env)
		if c.unset {
			os.Unsetenv(StopEnv)
		}
		stops = 0
		Stop(c.rank, c.at)
		if (stops == 1) != c.stop || stops > 1 {
			t.Errorf("%s=%q (unset %v): Stop(%d, %q) stopped %d times, want stop %v", StopEnv, c.env, c.unset, c.rank, c.at, stops, c.stop)
		}
	}
}

func TestDealAndSlowWindow(t *testing.T) {
	t.Setenv("CANOPY_TILE_DEAL", "static")
	t.Setenv("CANOPY_TEST_SLOW_MS", "25")
	if !StaticDeal() || SlowWindow() != 25*time.Millisecond {
		t.Fatalf("StaticDeal %v, SlowWindow %v; want true, 25ms", StaticDeal(), SlowWindow())
	}
	t.Setenv("CANOPY_TILE_DEAL", "dynamic")
	if StaticDeal() {
		t.Fatal("CANOPY_TILE_DEAL=dynamic read as static")
	}
}
