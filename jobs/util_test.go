package jobs

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"os"
	"testing"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// readCSVRecords reads a whole CSV file (header included), failing the test
// on any error.
func readCSVRecords(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
