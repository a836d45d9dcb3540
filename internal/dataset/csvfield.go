package dataset

// CSVField is s as one field of a CSV line, quoted when it holds a comma,
// a quote or a line break (the quoting the readers here undo).
func CSVField(s string) string { return csvQuote(s) }
