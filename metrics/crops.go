package metrics

import (
	"fmt"
	"math"
)

// CropTable is DeepForest's CropModel validation table (deepforest 2.1.0
// model.py: validation_step and on_validation_epoch_end) as Lightning
// returns it from trainer.validate on one device, with the confusion
// matrix it is made from.
type CropTable struct {
	// ClassAccuracy[c] is torchmetrics' multiclass Accuracy with
	// average="none": tp/(tp+fn) of class c in float32, 0 for a class
	// absent from the targets.
	ClassAccuracy []float32
	// Accuracy and Precision are the micro averages (Accuracy, Precision
	// with torchmetrics' default average): correct/N, both.
	Accuracy, Precision float32
	// MacroPrecision is Precision(average="macro"): each class's
	// tp/(tp+fp) (0 when never predicted), weighted 0 for a class absent
	// from both targets and predictions, each term divided by the weight
	// sum and the terms summed as torch.sum sums float32.
	MacroPrecision float32
	// ValLoss is Lightning's epoch mean of validation_step's
	// F.cross_entropy: Σ_b float32(loss_b·n_b) / Σ_b n_b in float32, over
	// batches of batchSize consecutive crops (DeepForest's
	// cropmodel.batch_size), each loss_b torch's float32 mean.
	ValLoss float32
	// Confusion[t][p] counts the crops of target t predicted p (argmax of
	// the logits, the first of equal maxima, as torch.argmax).
	Confusion [][]int64
	// Pred is each crop's predicted class.
	Pred []int32
}

// ComputeCropTable computes the table of n crops from their logits (n
// rows of classes float32 values, crop order = the dataset's order) and
// targets. It is a pure function of its arguments: the same bits for the
// same crops, whoever computed the logits.
func ComputeCropTable(logits []float32, classes int, targets []int32, batchSize int) (CropTable, error) {
	n := len(targets)
	switch {
	case classes < 1:
		return CropTable{}, fmt.Errorf("metrics: %d classes", classes)
	case len(logits) != n*classes:
		return CropTable{}, fmt.Errorf("metrics: %d logits for %d crops of %d classes", len(logits), n, classes)
	case batchSize < 1:
		return CropTable{}, fmt.Errorf("metrics: batch size %d", batchSize)
	}
	t := CropTable{ClassAccuracy: make([]float32, classes), Confusion: make([][]int64, classes), Pred: make([]int32, n)}
	for c := range t.Confusion {
		t.Confusion[c] = make([]int64, classes)
	}
	logp := make([]float32, n) // log_softmax at the target
	for i, y := range targets {
		if y < 0 || int(y) >= classes {
			return CropTable{}, fmt.Errorf("metrics: crop %d: target %d outside [0, %d)", i, y, classes)
		}
		row := logits[i*classes : (i+1)*classes]
		for _, v := range row {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return CropTable{}, fmt.Errorf("metrics: crop %d: logit %v", i, v)
			}
		}
		p := argmax32(row)
		t.Pred[i] = int32(p)
		t.Confusion[y][p]++
		logp[i] = logSoftmaxAt(row, int(y))
	}
	var tpAll, fpAll, fnAll int64
	macro := make([]float32, classes)
	var weights float32
	for c := range classes {
		tp := t.Confusion[c][c]
		var fn, fp int64
		for k := range classes {
			if k != c {
				fn += t.Confusion[c][k]
				fp += t.Confusion[k][c]
			}
		}
		tpAll, fpAll, fnAll = tpAll+tp, fpAll+fp, fnAll+fn
		t.ClassAccuracy[c] = safeDiv32(tp, tp+fn)
		macro[c] = safeDiv32(tp, tp+fp)
		if tp+fp+fn > 0 {
			weights++
		} else {
			macro[c] = 0 // weight 0
		}
	}
	t.Accuracy = safeDiv32(tpAll, tpAll+fnAll)
	t.Precision = safeDiv32(tpAll, tpAll+fpAll)
	for c := range macro {
		if weights != 0 {
			macro[c] = macro[c] / weights
		} else {
			macro[c] = 0
		}
	}
	t.MacroPrecision = torchSum32(macro)
	var value float32
	var count int64
	for b := 0; b < n; b += batchSize {
		e := min(b+batchSize, n)
		value += float32(nllMean(logp[b:e]) * float32(e-b)) // rounded before the add: no fused multiply-add
		count += int64(e - b)
	}
	if count > 0 {
		t.ValLoss = value / float32(count)
	} else {
		t.ValLoss = float32(math.NaN()) // Lightning's 0/0
	}
	return t, nil
}

// safeDiv32 is torchmetrics' _safe_divide of two counts: float32(num) /
// float32(den), 0 where den is 0.
func safeDiv32(num, den int64) float32 {
	if den == 0 {
		return 0
	}
	return float32(num) / float32(den)
}

// argmax32 is the first index of the largest value.
func argmax32(row []float32) int {
	k := 0
	for i, v := range row {
		if v > row[k] {
			k = i
		}
	}
	return k
}

// logSoftmaxAt is torch's CPU log_softmax of row (last dimension,
// vectorized kernel) at index y, in float32: (x − max) − log(Σ exp(x_j −
// max)), the sum in the order of vec::map_reduce_all over torchLanes
// lanes (sequential below one vector; lane-wise, then the lanes reduced
// pairwise from the halves down, above). The exp is float64's rounded to
// float32, where torch uses SLEEF's expf (1 ulp): the two differ in the
// last bit for some inputs (about 3% of rows in tools/cropmodel's test).
func logSoftmaxAt(row []float32, y int) float32 {
	m := row[0]
	for _, v := range row[1:] {
		m = max(m, v)
	}
	e := func(v float32) float32 { return float32(math.Exp(float64(v - m))) }
	var s float32
	if len(row) < torchLanes {
		s = e(row[0])
		for _, v := range row[1:] {
			s += e(v)
		}
	} else {
		var acc [torchLanes]float32
		for l := range acc {
			acc[l] = e(row[l])
		}
		d := torchLanes
		for ; d < len(row)-len(row)%torchLanes; d += torchLanes {
			for l := range acc {
				acc[l] += e(row[d+l])
			}
		}
		for l := 0; d+l < len(row); l++ {
			acc[l] += e(row[d+l])
		}
		for half := torchLanes / 2; half >= 1; half /= 2 {
			var next [torchLanes]float32
			for l := range acc {
				next[l] = acc[l] + acc[l^half]
			}
			acc = next
		}
		s = acc[0]
	}
	return (row[y] - m) - float32(math.Log(float64(s)))
}

// nllMean is torch's CPU nll_loss with reduction "mean" over the
// log-probabilities at the targets (no weights, no ignored index): a
// cascade of 8 partial sums of −logp with step 2^max(4, ceil(log2 n)/8),
// summed at the end from the lowest level up, divided by n in float32.
func nllMean(logp []float32) float32 {
	const levels = 8
	n := len(logp)
	power := max(4, ceilLog2(n)/levels)
	mask := 1<<power - 1
	var part [levels]float32
	for b, v := range logp {
		part[0] -= v
		for j := 0; j+1 < levels; j++ {
			if b&(mask<<(j*power)) != 0 {
				break
			}
			part[j+1] += part[j]
			part[j] = 0
		}
	}
	var total float32
	for _, p := range part {
		total += p
	}
	return total / float32(n)
}
