//go:build !nogdal

package gdal

/*
#cgo pkg-config: gdal
#include <stdio.h>
#include <stdlib.h>
#include <gdal.h>
#include <cpl_error.h>
#include <cpl_conv.h>
#include <ogr_srs_api.h>

// Every call and the read of its error message happen in one C function:
// GDAL's last error is per thread, and a goroutine may change threads
// between two cgo calls.
static void canopy_err(char *err, int n) {
	const char *m = CPLGetLastErrorMsg();
	snprintf(err, n, "%s", (m && *m) ? m : "no message from GDAL");
}

static void canopy_init(void) {
	GDALAllRegister();
	CPLSetErrorHandler(CPLQuietErrorHandler); // errors are returned, not printed
}

static GDALDatasetH canopy_open(const char *path, char *err, int n) {
	static const char *const drivers[] = {"GTiff", "JPEG", "PNG", NULL};
	CPLErrorReset();
	GDALDatasetH h = GDALOpenEx(path, GDAL_OF_RASTER | GDAL_OF_READONLY, drivers, NULL, NULL);
	if (!h) canopy_err(err, n);
	return h;
}

// canopy_info fills what Info needs; type of each of the first 4 bands;
// the block size; bands 1-3's nodata values (hasnd[b] 0: none); mask:
// band 1's mask is per dataset (an alpha band or a TIFF mask).
static void canopy_info(GDALDatasetH h, int *w, int *hh, int *bands, int *types, int *alpha, double *gt, int *hasgt, int *bx, int *by,
		double *nd, int *hasnd, int *mask) {
	*w = GDALGetRasterXSize(h);
	*hh = GDALGetRasterYSize(h);
	*bands = GDALGetRasterCount(h);
	*bx = *by = 0;
	if (*bands > 0) GDALGetBlockSize(GDALGetRasterBand(h, 1), bx, by); // from the header: no block is read
	for (int b = 0; b < 4 && b < *bands; b++) types[b] = (int)GDALGetRasterDataType(GDALGetRasterBand(h, b + 1));
	*alpha = 0;
	if (*bands == 4) *alpha = GDALGetRasterColorInterpretation(GDALGetRasterBand(h, 4)) == GCI_AlphaBand;
	*hasgt = GDALGetGeoTransform(h, gt) == CE_None;
	for (int b = 0; b < 3; b++) {
		hasnd[b] = 0;
		nd[b] = 0;
		if (b < *bands) nd[b] = GDALGetRasterNoDataValue(GDALGetRasterBand(h, b + 1), &hasnd[b]);
	}
	*mask = 0;
	if (*bands >= 1) *mask = (GDALGetMaskFlags(GDALGetRasterBand(h, 1)) & GMF_PER_DATASET) != 0;
}

// canopy_read_mask reads a window of the alpha band (band 4 when it is
// alpha, else band 1's per-dataset mask) as bytes.
static int canopy_read_mask(GDALDatasetH h, int band4, int x, int y, int w, int hh, void *buf, char *err, int n) {
	CPLErrorReset();
	GDALRasterBandH b = band4 ? GDALGetRasterBand(h, 4) : GDALGetMaskBand(GDALGetRasterBand(h, 1));
	CPLErr e = b ? GDALRasterIO(b, GF_Read, x, y, w, hh, buf, w, hh, GDT_Byte, 0, 0) : CE_Failure;
	if (e != CE_None || CPLGetLastErrorType() >= CE_Failure) {
		canopy_err(err, n);
		return 1;
	}
	return 0;
}

// canopy_projjson: a WKT CRS as one-line PROJJSON (CPLFree it), NULL on
// error.
static char *canopy_projjson(const char *wkt, char *err, int n) {
	CPLErrorReset();
	OGRSpatialReferenceH s = OSRNewSpatialReference(wkt);
	if (!s) { canopy_err(err, n); return NULL; }
	char *out = NULL;
	const char *opts[] = {"MULTILINE=NO", NULL};
	OGRErr e = OSRExportToPROJJSON(s, &out, opts);
	OSRRelease(s);
	if (e != OGRERR_NONE || !out) {
		canopy_err(err, n);
		CPLFree(out);
		return NULL;
	}
	return out;
}

// canopy_read reads bands 1-3 of a window, band after band, as type t.
static int canopy_read(GDALDatasetH h, int x, int y, int w, int hh, void *buf, int t, char *err, int n) {
	int map[3] = {1, 2, 3};
	CPLErrorReset();
	CPLErr e = GDALDatasetRasterIO(h, GF_Read, x, y, w, hh, buf, w, hh, (GDALDataType)t, 3, map, 0, 0, 0);
	if (e != CE_None || CPLGetLastErrorType() >= CE_Failure) {
		canopy_err(err, n);
		return 1;
	}
	return 0;
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Available reports whether this build reads rasters.
const Available = true

var initOnce sync.Once

// cacheMax is the block cache SetCacheMax gave (DefaultCacheMax until then).
var cacheMax = func() *atomic.Int64 {
	var v atomic.Int64
	v.Store(DefaultCacheMax)
	return &v
}()

func initGDAL() { initOnce.Do(func() { C.canopy_init() }) }

// SetCacheMax bounds GDAL's block cache (bytes, for the whole process);
// Open refuses a raster whose block is larger (Info.checkBlock).
func SetCacheMax(bytes int64) {
	initGDAL()
	cacheMax.Store(bytes)
	C.GDALSetCacheMax64(C.GIntBig(bytes))
}

// Raster is an open raster. Its methods may be called from any goroutine;
// reads are serialised (a GDAL dataset is not safe for concurrent use).
type Raster struct {
	mu    sync.Mutex
	h     C.GDALDatasetH
	path  string
	info  Info
	band4 bool // the alpha is band 4 (else band 1's per-dataset mask)
}

const errLen = 512

// Open opens path read-only. It must be a regular file that GDAL's GTiff,
// JPEG or PNG driver reads, with 3 or 4 bands (the fourth an unassociated
// alpha band) of 8- or 16-bit samples and blocks (tiles or strips, as its
// header states them) that fit the block cache; its first and last pixels
// are read, so that a file cut short is refused here rather than halfway
// through a job.
func Open(path string) (*Raster, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("gdal: %w: %w", err, ErrRaster)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gdal: %s is not a regular file: %w", path, ErrRaster)
	}
	initGDAL()
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var ebuf [errLen]C.char
	h := C.canopy_open(cp, &ebuf[0], errLen)
	if h == nil {
		return nil, fmt.Errorf("gdal: %s is not a raster canopy reads (GeoTIFF, JPEG, PNG): %s: %w", path, C.GoString(&ebuf[0]), ErrRaster)
	}
	r := &Raster{h: h, path: path}
	var w, hh, bands, alpha, hasgt, bx, by, mask C.int
	var types [4]C.int
	var hasnd [3]C.int
	var gt [6]C.double
	var nd [3]C.double
	C.canopy_info(h, &w, &hh, &bands, &types[0], &alpha, &gt[0], &hasgt, &bx, &by, &nd[0], &hasnd[0], &mask)
	in := Info{Width: int(w), Height: int(hh), Bands: int(bands), HasTransform: hasgt != 0, BlockW: int(bx), BlockH: int(by),
		Driver: C.GoString(C.GDALGetDriverShortName(C.GDALGetDatasetDriver(h))),
		Alpha:  alpha != 0 || mask != 0}
	for i := range gt {
		in.GeoTransform[i] = float64(gt[i])
	}
	for b := range nd {
		in.NoData[b], in.HasNoData[b] = float64(nd[b]), hasnd[b] != 0
	}
	r.band4 = alpha != 0
	in.CRS = C.GoString(C.GDALGetProjectionRef(h))
	typeName := ""
	if in.Bands >= 3 {
		in.Bits = bitsOf(types[0])
		typeName = C.GoString(C.GDALGetDataTypeName(C.GDALDataType(types[0])))
		for b := 1; b < min(in.Bands, 4); b++ {
			if types[b] != types[0] {
				in.Bits = 0
				typeName = "mixed " + typeName + "/" + C.GoString(C.GDALGetDataTypeName(C.GDALDataType(types[b])))
			}
		}
	}
	err = in.check(path, typeName)
	if err == nil && in.Bands == 4 && alpha == 0 {
		err = fmt.Errorf("gdal: %s has 4 bands and the fourth is not alpha: canopy reads RGB or RGBA: %w", path, ErrRaster)
	}
	if err == nil {
		err = in.checkBlock(path, cacheMax.Load())
	}
	r.info = in
	if err == nil {
		_, err = r.Read(0, 0, 1, 1)
	}
	if err == nil {
		_, err = r.Read(in.Width-1, in.Height-1, 1, 1)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func bitsOf(t C.int) int {
	switch C.GDALDataType(t) {
	case C.GDT_Byte:
		return 8
	case C.GDT_UInt16:
		return 16
	}
	return 0
}

// Info describes the raster.
func (r *Raster) Info() Info { return r.info }

// Read reads the window of w×h pixels at (x, y), which must lie inside
// the raster, as 8-bit R, G and B planes.
func (r *Raster) Read(x, y, w, h int) (RGB8, error) {
	s, err := r.read(x, y, w, h, false)
	if err != nil {
		return RGB8{}, err
	}
	return s.RGB8(), nil
}

// ReadSamples reads the window of w×h pixels at (x, y), which must lie
// inside the raster, as stored: bands 1–3 as 8- or 16-bit planes and, when
// Info().Alpha, the alpha (or mask) plane; RGB8() gives what Read gives.
func (r *Raster) ReadSamples(x, y, w, h int) (Samples, error) {
	return r.read(x, y, w, h, r.info.Alpha)
}

func (r *Raster) read(x, y, w, h int, alpha bool) (Samples, error) {
	in := r.info
	if x < 0 || y < 0 || w < 1 || h < 1 || x > in.Width-w || y > in.Height-h {
		return Samples{}, fmt.Errorf("gdal: %s: window %dx%d at (%d,%d) outside the %dx%d raster: %w", r.path, w, h, x, y, in.Width, in.Height, ErrRaster)
	}
	n := 3 * w * h
	out := Samples{W: w, H: h}
	var ebuf [errLen]C.char
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h == nil {
		return Samples{}, fmt.Errorf("gdal: %s: read after close: %w", r.path, ErrRaster)
	}
	var rc C.int
	if in.Bits == 16 {
		out.Pix16 = make([]uint16, n)
		rc = C.canopy_read(r.h, C.int(x), C.int(y), C.int(w), C.int(h), unsafe.Pointer(&out.Pix16[0]), C.GDT_UInt16, &ebuf[0], errLen)
	} else {
		out.Pix8 = make([]uint8, n)
		rc = C.canopy_read(r.h, C.int(x), C.int(y), C.int(w), C.int(h), unsafe.Pointer(&out.Pix8[0]), C.GDT_Byte, &ebuf[0], errLen)
	}
	if rc == 0 && alpha {
		out.Alpha = make([]uint8, w*h)
		band4 := C.int(0)
		if r.band4 {
			band4 = 1
		}
		rc = C.canopy_read_mask(r.h, band4, C.int(x), C.int(y), C.int(w), C.int(h), unsafe.Pointer(&out.Alpha[0]), &ebuf[0], errLen)
	}
	if rc != 0 {
		return Samples{}, fmt.Errorf("gdal: %s: reading window %dx%d at (%d,%d): %s (truncated or corrupt?): %w", r.path, w, h, x, y, C.GoString(&ebuf[0]), ErrRaster)
	}
	return out, nil
}

// PROJJSON is a CRS given as WKT (Info.CRS) as one-line PROJJSON
// (OSRExportToPROJJSON), what GeoParquet's "crs" holds; "" gives nil (no
// CRS).
func PROJJSON(crsWKT string) ([]byte, error) {
	if crsWKT == "" {
		return nil, nil
	}
	initGDAL()
	cw := C.CString(crsWKT)
	defer C.free(unsafe.Pointer(cw))
	var ebuf [errLen]C.char
	p := C.canopy_projjson(cw, &ebuf[0], errLen)
	if p == nil {
		return nil, fmt.Errorf("gdal: a CRS GDAL cannot write as PROJJSON: %s", C.GoString(&ebuf[0]))
	}
	defer C.CPLFree(unsafe.Pointer(p))
	return []byte(C.GoString(p)), nil
}

// Close closes the raster; later reads fail.
func (r *Raster) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h != nil {
		C.GDALClose(r.h)
		r.h = nil
	}
	return nil
}
