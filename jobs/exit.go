package jobs

import (
	"github.com/canopy-hpc/canopy/internal/errkind"
)

// The exit codes and error kinds live in internal/errkind, where every
// room below the commands can return them; these names are jobs' public
// face of them (main and the tests use them).
const (
	ExitOK         = errkind.ExitOK
	ExitInternal   = errkind.ExitInternal
	ExitUsage      = errkind.ExitUsage
	ExitInput      = errkind.ExitInput
	ExitModel      = errkind.ExitModel
	ExitMPI        = errkind.ExitMPI
	ExitDisagree   = errkind.ExitDisagree
	ExitRegression = errkind.ExitRegression
	ExitResumable  = errkind.ExitResumable
)

// ExitTable is the exit-code table as printed in --help.
const ExitTable = errkind.ExitTable

// Error carries an exit code (errkind.Error).
type Error = errkind.Error

// Code returns the exit code for err (0 for nil, 1 when err carries none).
func Code(err error) int { return errkind.Code(err) }

var (
	usageError = errkind.UsageError
	ioErr      = errkind.IO
)
