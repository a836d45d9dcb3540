// Package testfile holds the tests' file reads that fail the test on any
// error: a JSON fixture into a value (ReadJSON), a whole CSV file
// (ReadCSV).
package testfile

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"testing"
)

// ReadJSON decodes the JSON file at path into v, failing t (naming the
// file) when it cannot be read or decoded.
func ReadJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// ReadCSV reads a whole CSV file (header included), failing t on any
// error.
func ReadCSV(t testing.TB, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return recs
}
