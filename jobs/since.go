package jobs

import "time"

// since is the seconds since t.
func since(t time.Time) float64 { return time.Since(t).Seconds() }
