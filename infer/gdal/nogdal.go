//go:build nogdal

package gdal

// Available reports whether this build reads rasters.
const Available = false

// SetCacheMax does nothing without GDAL.
func SetCacheMax(int64) {}

// Raster is an open raster; without GDAL there is none.
type Raster struct{}

// Open fails: this build has no GDAL.
func Open(path string) (*Raster, error) { return nil, ErrUnavailable }

// Info is never reached without GDAL.
func (r *Raster) Info() Info { return Info{} }

// Read is never reached without GDAL.
func (r *Raster) Read(x, y, w, h int) (RGB8, error) { return RGB8{}, ErrUnavailable }

// ReadSamples is never reached without GDAL.
func (r *Raster) ReadSamples(x, y, w, h int) (Samples, error) { return Samples{}, ErrUnavailable }

// PROJJSON fails: this build has no GDAL ("" gives nil, as with GDAL).
func PROJJSON(crsWKT string) ([]byte, error) {
	if crsWKT == "" {
		return nil, nil
	}
	return nil, ErrUnavailable
}

// Close does nothing.
func (r *Raster) Close() error { return nil }

// WriteGPKG fails: this build has no GDAL.
func WriteGPKG(path string, layers []Layer) error { return ErrUnavailable }

// GPKGWriter is the stub of the GeoPackage writer.
type GPKGWriter struct{}

// CreateGPKG says GDAL is not built in.
func CreateGPKG(path string) (*GPKGWriter, error) { return nil, ErrUnavailable }

// Add says GDAL is not built in.
func (w *GPKGWriter) Add(Layer) error { return ErrUnavailable }

// Close says GDAL is not built in.
func (w *GPKGWriter) Close() error { return ErrUnavailable }

// ReadVector fails: this build has no GDAL.
func ReadVector(path string) (*Vector, error) { return nil, ErrUnavailable }

// SameCRS is never reached without GDAL.
func SameCRS(a, b string) bool { return false }

// CRSName is never reached without GDAL.
func CRSName(wkt string) string { return "" }
