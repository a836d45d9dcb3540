// Package report reads canopy's report.json and compares two of them:
// the report's types as compare reads them, the verdicts (one per metric
// row, with tolerances and directions) and the output formats of
// `canopy compare` (text table, GitHub markdown, JUnit XML and the HTML
// page through internal/htmlreport). It needs no MPI and knows no exit
// codes: jobs owns the command, its flags and its exit codes.
package report
