// Package jobs composes canopy's rooms into its pipelines: the command
// line (urfave/cli), the `canopy eval` job (read once and broadcast, plan,
// detect, encode and gather, merge, score, agree, report) and the exit-code
// rules that keep every rank's exit consistent.
package jobs
