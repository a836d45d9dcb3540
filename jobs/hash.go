package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"os"
)

// The one hashing helper of jobs: sha256 digests in hex, of bytes, of a
// file or of a stream (newDigest, digestHex), and their short form for
// messages.

// sha256Hex is the hex sha256 of b.
func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// hashFile is the hex sha256 of a file.
func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := newDigest()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return digestHex(h), nil
}

// fileSHA is hashFile's digest, "" when the file cannot be read (as
// resolveModel records an absent config.json).
func fileSHA(path string) string {
	d, _ := hashFile(path)
	return d
}

// newDigest starts a sha256 of a stream; digestHex ends it.
func newDigest() hash.Hash { return sha256.New() }

// digestHex is the hex digest of h.
func digestHex(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// shortSHA shortens a hex digest for a message.
func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}
