// Package treeformer is DeepForest's point model TreeFormer (DeepForest
// commit 1bad4419, models/treeformer.py and treeformer_decoder.py) on
// canopy's CPU engine: a PvT-v2-b3 backbone (transformers' PvtV2Model), the
// density decoder's point path (the unused heads skipped), and the peak
// finding and tile mosaic of DeepForest's point predictions.
package treeformer
