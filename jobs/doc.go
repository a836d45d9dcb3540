// Package jobs is canopy's command layer: the command line (urfave/cli),
// each command's flags made into the typed config of its pipeline (`canopy
// eval`'s is internal/pipeline/eval: read once and broadcast, load the
// model and pre-flight the images on every rank when --model is given,
// plan, detect, encode and gather, merge, score, agree, report); `canopy
// predict`'s job (the same without truth or metrics); `canopy compare` and
// `canopy doctor`; and the exit-code rules that keep every rank's exit
// consistent.
package jobs
