// Package metrics computes canopy's validation metrics as pure functions of
// the dataset and the merged detections: no I/O, no MPI, a fixed summation
// order, so every rank that holds the same inputs gets the same bits.
//
// It reproduces DeepForest's box recall and precision (commit 1bad4419):
// the RecallPrecision metric of trainer.validate (Semantics Validation) and
// evaluate_boxes (Semantics EvaluateBoxes), including their float32 and
// numpy pairwise-summation arithmetic.
package metrics
