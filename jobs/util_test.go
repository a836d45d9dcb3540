package jobs

import (
	"bytes"
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
