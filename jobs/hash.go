package jobs

// shortSHA shortens a hex digest for a message.
func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}
