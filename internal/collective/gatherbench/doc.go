// Package gatherbench holds the benchmark of canopy's gather path under a
// real mpirun: 1,000,000 model-output boxes (float32 coordinates and
// scores, as DeepForest's prediction frames hold them) split over the
// ranks, encoded with the wire format, exchanged with AllgatherBytes and
// merged into per-image arrays on every rank. tools/gatherbench/peers.py
// measures DeepForest's way (pickled DataFrames through torch's
// all_gather_object and mpi4py's allgather) on the same shape of data.
//
// Run: go test -c -o bin/gatherbench.test ./internal/collective/gatherbench &&
// scripts/mpirun.sh -np 2 bin/gatherbench.test -test.run '^$' -test.bench . -test.benchtime 10x
package gatherbench
