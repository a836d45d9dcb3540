//go:build !nogdal

package gdal

/*
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gdal.h>
#include <ogr_api.h>
#include <ogr_srs_api.h>
#include <cpl_error.h>
#include <cpl_conv.h>
#include <cpl_string.h>

static GDALDatasetH canopy_vopen(const char *path) {
	static const char *const drivers[] = {"ESRI Shapefile", "GPKG", NULL};
	CPLErrorReset();
	return GDALOpenEx(path, GDAL_OF_VECTOR | GDAL_OF_READONLY, drivers, NULL, NULL);
}

static const char *canopy_lasterr(void) {
	const char *m = CPLGetLastErrorMsg();
	return (m && *m) ? m : "no message from GDAL";
}

static int canopy_failed(void) { return CPLGetLastErrorType() >= CE_Failure; }

// canopy_crs: the layer's CRS as WKT (CPLFree it), its authority name and
// code when GDAL identifies it (auth, code: "" else), geographic or not.
// The GeoPackage placeholders for "no CRS" (srs_id 0 "Undefined geographic
// SRS", GDAL's default; -1 "Undefined Cartesian SRS"; GDAL's 99999
// "Undefined SRS") are no CRS: NULL, their name in undef.
static char *canopy_crs(OGRLayerH l, char *auth, int n, int *geographic, char *undef, int un) {
	OGRSpatialReferenceH s = OGR_L_GetSpatialRef(l);
	auth[0] = 0;
	undef[0] = 0;
	*geographic = 0;
	if (!s) return NULL;
	const char *name = OSRGetName(s);
	if (name && !OSRGetAuthorityName(s, NULL) &&
		(!strcmp(name, "Undefined geographic SRS") || !strcmp(name, "Undefined Cartesian SRS") || !strcmp(name, "Undefined SRS"))) {
		snprintf(undef, un, "%s", name);
		return NULL;
	}
	char *wkt = NULL;
	const char *opts[] = {"FORMAT=WKT2_2019", NULL};
	if (OSRExportToWktEx(s, &wkt, opts) != OGRERR_NONE) { CPLFree(wkt); return NULL; }
	*geographic = OSRIsGeographic(s);
	const char *an = OSRGetAuthorityName(s, NULL), *ac = OSRGetAuthorityCode(s, NULL);
	if (an && ac) {
		snprintf(auth, n, "%s:%s", an, ac);
	} else {
		int count = 0, *conf = NULL;
		OGRSpatialReferenceH *m = OSRFindMatches(s, NULL, &count, &conf);
		if (m && count > 0 && conf[0] == 100) {
			an = OSRGetAuthorityName(m[0], NULL);
			ac = OSRGetAuthorityCode(m[0], NULL);
			if (an && ac) snprintf(auth, n, "%s:%s", an, ac);
		}
		OSRFreeSRSArray(m);
		CPLFree(conf);
	}
	return wkt;
}

// canopy_same_crs: two WKT CRSs describe the same system (axis order
// aside).
static int canopy_same_crs(const char *a, const char *b) {
	OGRSpatialReferenceH sa = OSRNewSpatialReference(a), sb = OSRNewSpatialReference(b);
	int same = 0;
	if (sa && sb) {
		const char *opts[] = {"IGNORE_DATA_AXIS_TO_SRS_AXIS_MAPPING=YES", "CRITERION=EQUIVALENT_EXCEPT_AXIS_ORDER_GEOGCRS", NULL};
		same = OSRIsSameEx(sa, sb, opts);
	}
	if (sa) OSRRelease(sa);
	if (sb) OSRRelease(sb);
	return same;
}

// canopy_sqlite_kind asks a GeoPackage's SQLite what the layer's table is:
// its sqlite_master type and the start of its SQL (kind, n bytes each).
static void canopy_sqlite_kind(GDALDatasetH h, const char *query, char *kind, char *sql, int n) {
	kind[0] = sql[0] = 0;
	OGRLayerH r = GDALDatasetExecuteSQL(h, query, NULL, "NATIVE");
	if (!r) return;
	OGRFeatureH f = OGR_L_GetNextFeature(r);
	if (f) {
		snprintf(kind, n, "%s", OGR_F_GetFieldAsString(f, 0));
		snprintf(sql, n, "%s", OGR_F_GetFieldAsString(f, 1));
		OGR_F_Destroy(f);
	}
	GDALDatasetReleaseResultSet(h, r);
}

// canopy_geom: a feature's geometry: its flattened type (-1: none), empty
// or not, envelope.
static void canopy_geom(OGRFeatureH f, int *type, int *empty, double *env) {
	OGRGeometryH g = OGR_F_GetGeometryRef(f);
	*type = -1;
	*empty = 1;
	if (!g) return;
	*type = (int)OGR_GT_Flatten(OGR_G_GetGeometryType(g));
	*empty = OGR_G_IsEmpty(g);
	if (!*empty) {
		OGREnvelope e;
		OGR_G_GetEnvelope(g, &e);
		env[0] = e.MinX; env[1] = e.MinY; env[2] = e.MaxX; env[3] = e.MaxY;
	}
}
// canopy_geom_wkb: a feature's geometry as ISO WKB, little endian
// (malloc'd; free it), its size in *n; NULL without a geometry, and *n = -1
// when it is larger than max bytes.
static unsigned char *canopy_geom_wkb(OGRFeatureH f, int *n, int max) {
	OGRGeometryH g = OGR_F_GetGeometryRef(f);
	*n = 0;
	if (!g) return NULL;
	int sz = OGR_G_WkbSize(g);
	if (sz > max) { *n = -1; return NULL; }
	unsigned char *b = malloc(sz > 0 ? sz : 1);
	if (!b) return NULL;
	if (OGR_G_ExportToIsoWkb(g, wkbNDR, b) != OGRERR_NONE) { free(b); return NULL; }
	*n = sz;
	return b;
}
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"
)

// shapelyTypes names OGR's flat geometry types as shapely does.
var shapelyTypes = map[C.int]string{
	C.wkbPoint: "Point", C.wkbLineString: "LineString", C.wkbPolygon: "Polygon", C.wkbMultiPoint: "MultiPoint",
	C.wkbMultiLineString: "MultiLineString", C.wkbMultiPolygon: "MultiPolygon", C.wkbGeometryCollection: "GeometryCollection",
	C.wkbCircularString: "CircularString", C.wkbCompoundCurve: "CompoundCurve", C.wkbCurvePolygon: "CurvePolygon",
	C.wkbMultiCurve: "MultiCurve", C.wkbMultiSurface: "MultiSurface", C.wkbPolyhedralSurface: "PolyhedralSurface",
	C.wkbTIN: "TIN", C.wkbTriangle: "Triangle",
}

// ReadVector reads the first layer of a shapefile (.shp beside its .shx,
// .dbf and .prj) or a GeoPackage, opened read-only by GDAL's "ESRI
// Shapefile" or "GPKG" driver only: the layer names, its CRS, and each
// feature's geometry type, envelope, label and image_path (only those two
// columns are read). path must be a regular file. More than MaxFeatures
// features, or a label or image_path longer than MaxString bytes (or all
// of them longer than MaxStrings), is refused before it is held. Errors
// wrap ErrVector.
func ReadVector(path string) (*Vector, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("gdal: %w: %w", err, ErrVector)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gdal: %s is not a regular file: %w", path, ErrVector)
	}
	initGDAL()
	// GDAL's last error is per thread: keep every call of this read on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	h := C.canopy_vopen(cp)
	if h == nil {
		return nil, fmt.Errorf("gdal: %s is not a shapefile or GeoPackage canopy reads: %s: %w", path, C.GoString(C.canopy_lasterr()), ErrVector)
	}
	defer C.GDALClose(h)
	v := &Vector{Driver: C.GoString(C.GDALGetDriverShortName(C.GDALGetDatasetDriver(h)))}
	n := int(C.GDALDatasetGetLayerCount(h))
	if n < 1 {
		return nil, fmt.Errorf("gdal: %s has no layer: %w", path, ErrVector)
	}
	if n > 10000 {
		return nil, fmt.Errorf("gdal: %s has %d layers: %w", path, n, ErrVector)
	}
	for i := 0; i < n; i++ {
		v.Layers = append(v.Layers, C.GoString(C.OGR_L_GetName(C.GDALDatasetGetLayer(h, C.int(i)))))
	}
	if v.Driver == "GPKG" {
		// A GeoPackage layer may be an SQL view (or a virtual table),
		// which SQLite computes as it is read: a recursive one never
		// ends. Only an ordinary table is read.
		q := C.CString("SELECT type, sql FROM sqlite_master WHERE name = '" + strings.ReplaceAll(v.Layers[0], "'", "''") + "'")
		var kind, sql [64]C.char
		C.canopy_sqlite_kind(h, q, &kind[0], &sql[0], 64)
		C.free(unsafe.Pointer(q))
		k, def := C.GoString(&kind[0]), strings.ToUpper(strings.Join(strings.Fields(C.GoString(&sql[0])), " "))
		if strings.HasPrefix(def, "CREATE VIRTUAL") {
			k = "virtual table"
		}
		if k != "table" {
			if k == "" {
				k = "layer of no table"
			}
			return nil, fmt.Errorf("gdal: %s: its first layer %q is an SQLite %s, computed as it is read: canopy reads a GeoPackage layer stored as a table: %w", path, v.Layers[0], k, ErrVector)
		}
	}
	l := C.GDALDatasetGetLayer(h, 0)
	var auth, undef [128]C.char
	var geographic C.int
	if wkt := C.canopy_crs(l, &auth[0], 128, &geographic, &undef[0], 128); wkt != nil {
		v.CRS = C.GoString(wkt)
		C.CPLFree(unsafe.Pointer(wkt))
	}
	v.CRSName, v.Geographic, v.UndefinedCRS = C.GoString(&auth[0]), geographic != 0, C.GoString(&undef[0])
	defn := C.OGR_L_GetLayerDefn(l)
	label, image := fieldIndex(defn, "label"), fieldIndex(defn, "image_path")
	v.LabelField, v.ImagePathField = label >= 0, image >= 0
	var labelType C.OGRFieldType
	if label >= 0 {
		labelType = C.OGR_Fld_GetType(C.OGR_FD_GetFieldDefn(defn, label))
		v.LabelType = C.GoString(C.OGR_GetFieldTypeName(labelType))
	}
	// Read only the geometry and the two columns.
	var ignored []*C.char
	for i := C.int(0); i < C.OGR_FD_GetFieldCount(defn); i++ {
		if i != label && i != image {
			ignored = append(ignored, C.OGR_Fld_GetNameRef(C.OGR_FD_GetFieldDefn(defn, i)))
		}
	}
	ignored = append(ignored, nil)
	C.OGR_L_SetIgnoredFields(l, &ignored[0])
	C.CPLErrorReset()
	count := int64(C.OGR_L_GetFeatureCount(l, 1))
	if C.canopy_failed() != 0 {
		return nil, fmt.Errorf("gdal: %s: counting features: %s (truncated or corrupt?): %w", path, C.GoString(C.canopy_lasterr()), ErrVector)
	}
	if count > MaxFeatures {
		return nil, fmt.Errorf("gdal: %s has %d features, more than canopy reads as truth (%d): %w", path, count, MaxFeatures, ErrVector)
	}
	if count > 0 {
		v.Features = make([]VectorFeature, 0, count)
	}
	strs := 0
	value := func(f C.OGRFeatureH, i C.int, what string, fid int64) (string, bool, error) {
		if i < 0 || C.OGR_F_IsFieldSetAndNotNull(f, i) == 0 {
			return "", false, nil
		}
		var s string
		if what == "label" && labelType == C.OFTReal {
			s = PyFloat(float64(C.OGR_F_GetFieldAsDouble(f, i)))
		} else {
			p := C.OGR_F_GetFieldAsString(f, i)
			if k := C.strlen(p); k > MaxString {
				return "", false, fmt.Errorf("gdal: %s: feature %d: its %s is %d bytes long, more than %d: %w", path, fid, what, k, MaxString, ErrVector)
			}
			s = C.GoString(p)
		}
		if strs += len(s); strs > MaxStrings {
			return "", false, fmt.Errorf("gdal: %s: the labels and image paths exceed %d bytes: %w", path, MaxStrings, ErrVector)
		}
		return s, true, nil
	}
	wkbBytes := 0
	C.OGR_L_ResetReading(l)
	C.CPLErrorReset()
	for {
		f := C.OGR_L_GetNextFeature(l)
		if f == nil {
			break
		}
		if len(v.Features) >= MaxFeatures {
			C.OGR_F_Destroy(f)
			return nil, fmt.Errorf("gdal: %s has more than %d features, more than canopy reads as truth: %w", path, MaxFeatures, ErrVector)
		}
		vf := VectorFeature{FID: int64(C.OGR_F_GetFID(f))}
		var typ, empty C.int
		var env [4]C.double
		C.canopy_geom(f, &typ, &empty, &env[0])
		switch {
		case typ < 0:
		case shapelyTypes[typ] != "":
			vf.Type = shapelyTypes[typ]
		default:
			vf.Type = "OGR type " + strconv.Itoa(int(typ))
		}
		vf.Empty = empty != 0
		vf.MinX, vf.MinY, vf.MaxX, vf.MaxY = float64(env[0]), float64(env[1]), float64(env[2]), float64(env[3])
		var err error
		if vf.WKB, err = featureWKB(f, path, vf.FID, &wkbBytes); err != nil {
			C.OGR_F_Destroy(f)
			return nil, err
		}
		if vf.Label, vf.HasLabel, err = value(f, label, "label", vf.FID); err == nil {
			vf.ImagePath, vf.HasImagePath, err = value(f, image, "image_path", vf.FID)
		}
		C.OGR_F_Destroy(f)
		if err != nil {
			return nil, err
		}
		v.Features = append(v.Features, vf)
	}
	if C.canopy_failed() != 0 {
		return nil, fmt.Errorf("gdal: %s: reading features: %s (truncated or corrupt?): %w", path, C.GoString(C.canopy_lasterr()), ErrVector)
	}
	return v, nil
}

// fieldIndex finds a column by its exact name (OGR's own lookup ignores
// case; pandas does not).
// featureWKB copies a feature's geometry as ISO WKB (nil without one),
// refusing one over MaxWKB bytes or a layer whose geometries together
// exceed MaxWKBs.
func featureWKB(f C.OGRFeatureH, path string, fid int64, total *int) ([]byte, error) {
	var n C.int
	b := C.canopy_geom_wkb(f, &n, MaxWKB)
	if n < 0 {
		return nil, fmt.Errorf("gdal: %s: feature %d: its geometry is larger than %d bytes: %w", path, fid, MaxWKB, ErrVector)
	}
	if b == nil {
		return nil, nil
	}
	defer C.free(unsafe.Pointer(b))
	if *total += int(n); *total > MaxWKBs {
		return nil, fmt.Errorf("gdal: %s: the geometries exceed %d bytes: %w", path, MaxWKBs, ErrVector)
	}
	return C.GoBytes(unsafe.Pointer(b), n), nil
}

func fieldIndex(defn C.OGRFeatureDefnH, name string) C.int {
	for i := C.int(0); i < C.OGR_FD_GetFieldCount(defn); i++ {
		if C.GoString(C.OGR_Fld_GetNameRef(C.OGR_FD_GetFieldDefn(defn, i))) == name {
			return i
		}
	}
	return -1
}

// SameCRS reports whether two CRSs given as WKT describe the same system,
// axis order aside (GDAL's OSRIsSameEx).
func SameCRS(a, b string) bool {
	initGDAL()
	ca, cb := C.CString(a), C.CString(b)
	defer C.free(unsafe.Pointer(ca))
	defer C.free(unsafe.Pointer(cb))
	return C.canopy_same_crs(ca, cb) != 0
}

// CRSName is the authority name of a CRS given as WKT ("EPSG:32617"),
// or "" when GDAL does not identify it with full confidence.
func CRSName(wkt string) string {
	initGDAL()
	cw := C.CString(wkt)
	defer C.free(unsafe.Pointer(cw))
	s := C.OSRNewSpatialReference(cw)
	if s == nil {
		return ""
	}
	defer C.OSRRelease(s)
	an, ac := C.OSRGetAuthorityName(s, nil), C.OSRGetAuthorityCode(s, nil)
	if an != nil && ac != nil {
		return C.GoString(an) + ":" + C.GoString(ac)
	}
	return ""
}
