// Package shareddata is how tests reach ../shared, the folder beside the
// checkout that holds the DeepForest sample data and torchvision's key
// list. A test calls Need before reading a file there: when the file is
// absent the test is skipped, with the reason, so `go test` says SKIP and
// not a silent ok; with CANOPY_REQUIRE_SHARED=1 it fails instead. .ci/run
// sets that variable when it finds ../shared, so in CI a file that goes
// missing later cannot turn into a skip.
package shareddata

import (
	"os"
	"testing"
)

// RequireEnv names the variable that turns a missing file into a failure.
const RequireEnv = "CANOPY_REQUIRE_SHARED"

// Need skips t (or, with CANOPY_REQUIRE_SHARED=1, fails it) when path,
// described by what, is absent.
func Need(t testing.TB, path, what string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if Required() {
			t.Fatalf("%s is absent (%v) and %s=1 requires it", what, err, RequireEnv)
		}
		t.Skipf("%s is absent (%v): ../shared is not on this machine (%s=1 makes this a failure)", what, err, RequireEnv)
	}
}

// Required reports whether CANOPY_REQUIRE_SHARED=1.
func Required() bool { return os.Getenv(RequireEnv) == "1" }
