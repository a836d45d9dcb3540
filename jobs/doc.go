// Package jobs composes canopy's rooms into its pipelines: the command
// line (urfave/cli); the `canopy eval` job (read once and broadcast, load
// the model and pre-flight the images on every rank when --model is given,
// plan, detect, encode and gather, merge, score, agree, report); `canopy
// predict` (the same without truth or metrics); `canopy compare` and
// `canopy doctor`; and the exit-code rules that keep every rank's exit
// consistent.
package jobs
