package eval

import "time"

// since is the seconds since t (a rank's stage times).
func since(t time.Time) float64 { return time.Since(t).Seconds() }
