package outdir

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

// SHA256Hex is the hex sha256 of b.
func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// HashFile is the hex sha256 of a file.
func HashFile(path string) (string, error) {
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

// FileSHA is hashFile's digest, "" when the file cannot be read (as
// resolveModel records an absent config.json).
func FileSHA(path string) string {
	d, _ := HashFile(path)
	return d
}

// newDigest starts a sha256 of a stream; digestHex ends it.
func newDigest() hash.Hash { return sha256.New() }

// digestHex is the hex digest of h.
func digestHex(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// ShortSHA shortens a hex digest for a message.
func ShortSHA(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}
