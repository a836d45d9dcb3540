package cuda

import (
	"fmt"
	"strconv"
	"strings"
)

// Request is a parsed --device: "auto", "cpu", "cuda" or "cuda:N".
type Request struct {
	Kind  string // "auto", "cpu" or "cuda"
	Index int    // N of cuda:N; -1 for "cuda" (by local rank)
}

// ParseDevice reads a --device value ("" is auto).
func ParseDevice(s string) (Request, error) {
	if s == "" {
		s = "auto"
	}
	switch s {
	case "auto", "cpu":
		return Request{Kind: s, Index: -1}, nil
	case "cuda", "gpu":
		return Request{Kind: "cuda", Index: -1}, nil
	}
	if rest, ok := strings.CutPrefix(s, "cuda:"); ok {
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
			return Request{Kind: "cuda", Index: n}, nil
		}
	}
	return Request{}, fmt.Errorf("cuda: --device %q: want auto, cpu, cuda or cuda:N (N a device index among the visible ones)", s)
}

// Placement is where one rank runs its model.
type Placement struct {
	Kind  string // "cpu" or "cuda"
	Index int    // device ordinal among the visible ones (cuda)
	// Sharing is how many ranks of this node run on the same device (1:
	// the rank has it alone).
	Sharing int
	// Reason says why, for the report ("local rank 3 mod 2 visible devices").
	Reason string
}

// Place chooses a rank's device: with visible devices (after
// CUDA_VISIBLE_DEVICES; Slurm's --gpus-per-task leaves each rank its own
// device 0), node-local rank localRank runs on localRank mod visible; auto
// falls back to the CPU when there is no device or no cuda build. haveCUDA
// is HaveCUDA (a parameter so tests can play both builds). The zero
// Request is auto.
func Place(req Request, localRank, localSize, visible int, haveCUDA bool) (Placement, error) {
	if req.Kind == "" {
		req = Request{Kind: "auto", Index: -1}
	}
	if req.Kind == "cpu" || (req.Kind == "auto" && (!haveCUDA || visible == 0)) {
		why := "--device cpu"
		if req.Kind == "auto" {
			why = "auto: no GPU visible"
			if !haveCUDA {
				why = "auto: this build has no cuda backend"
			}
		}
		return Placement{Kind: "cpu", Index: -1, Sharing: 1, Reason: why}, nil
	}
	if !haveCUDA {
		return Placement{}, ErrNoCUDA
	}
	if visible == 0 {
		return Placement{}, fmt.Errorf("cuda: --device %s: no CUDA device is visible to this rank (check CUDA_VISIBLE_DEVICES and the job's GPU request)", req)
	}
	if localSize < 1 || localRank < 0 || localRank >= localSize {
		return Placement{}, fmt.Errorf("cuda: local rank %d of %d", localRank, localSize)
	}
	if req.Index >= 0 {
		if req.Index >= visible {
			return Placement{}, fmt.Errorf("cuda: --device cuda:%d: this rank sees %d device(s) (0..%d)", req.Index, visible, visible-1)
		}
		return Placement{Kind: "cuda", Index: req.Index, Sharing: localSize, Reason: fmt.Sprintf("--device cuda:%d", req.Index)}, nil
	}
	idx := localRank % visible
	// Ranks r < localSize with r mod visible == idx.
	sharing := (localSize-1-idx)/visible + 1
	return Placement{Kind: "cuda", Index: idx, Sharing: sharing,
		Reason: fmt.Sprintf("local rank %d mod %d visible device(s)", localRank, visible)}, nil
}

func (r Request) String() string {
	if r.Kind == "cuda" && r.Index >= 0 {
		return fmt.Sprintf("cuda:%d", r.Index)
	}
	return r.Kind
}

// Visible lists the devices a process sees under a CUDA_VISIBLE_DEVICES
// value (set false: unset, all total of them), as the driver reads it: a
// comma-separated list of indices or GPU-/MIG- UUIDs, cut at the first
// entry that is not a valid device or repeats one. Entry i is the
// process's device i. The driver applies the variable itself (cuda.Count
// sees the result); the jobs tests use this to fake a driver that does.
func Visible(value string, set bool, total int) []string {
	var out []string
	if !set {
		for i := 0; i < total; i++ {
			out = append(out, strconv.Itoa(i))
		}
		return out
	}
	seen := map[string]bool{}
	for _, f := range strings.Split(value, ",") {
		f = strings.TrimSpace(f)
		if seen[f] {
			break
		}
		if !strings.HasPrefix(f, "GPU-") && !strings.HasPrefix(f, "MIG-") {
			i, err := strconv.Atoi(f)
			if err != nil || i < 0 || i >= total {
				break
			}
		}
		seen[f] = true
		out = append(out, f)
	}
	return out
}
