//go:build nogdal

package gdal

import (
	"errors"
	"testing"
)

// TestStubs: without GDAL every call says so (ErrUnavailable); no CRS is
// still no CRS (PROJJSON("") is nil, as with GDAL).
func TestStubs(t *testing.T) {
	if Available {
		t.Fatal("Available in a nogdal build")
	}
	if _, err := Open("x.tif"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Open: %v", err)
	}
	var r Raster
	if _, err := r.ReadSamples(0, 0, 1, 1); !errors.Is(err, ErrUnavailable) {
		t.Errorf("ReadSamples: %v", err)
	}
	if p, err := PROJJSON(""); p != nil || err != nil {
		t.Errorf("PROJJSON(\"\"): %q, %v", p, err)
	}
	if _, err := PROJJSON(`GEOGCS["WGS 84"]`); !errors.Is(err, ErrUnavailable) {
		t.Errorf("PROJJSON: %v", err)
	}
}
