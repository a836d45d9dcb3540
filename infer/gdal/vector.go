//go:build !nogdal

package gdal

/*
#include <stdio.h>
#include <stdlib.h>
#include <gdal.h>
#include <ogr_api.h>
#include <ogr_srs_api.h>
#include <cpl_error.h>
#include <cpl_conv.h>

static void canopy_verr(char *err, int n) {
	const char *m = CPLGetLastErrorMsg();
	snprintf(err, n, "%s", (m && *m) ? m : "no message from GDAL");
}

static GDALDatasetH canopy_gpkg_create(const char *path, char *err, int n) {
	CPLErrorReset();
	GDALDriverH d = GDALGetDriverByName("GPKG");
	if (!d) { snprintf(err, n, "GDAL has no GPKG driver"); return NULL; }
	GDALDatasetH h = GDALCreate(d, path, 0, 0, 0, GDT_Unknown, NULL);
	if (!h) canopy_verr(err, n);
	return h;
}

// canopy_layer makes a polygon layer (points: a point layer) in the CRS
// given as WKT, with the columns of predictions.csv (for points
// image_path, x, y, label, score).
static OGRLayerH canopy_layer(GDALDatasetH h, const char *name, const char *wkt, int points, char *err, int n) {
	CPLErrorReset();
	OGRSpatialReferenceH srs = OSRNewSpatialReference(wkt);
	if (!srs) { canopy_verr(err, n); return NULL; }
	OSRSetAxisMappingStrategy(srs, OAMS_TRADITIONAL_GIS_ORDER);
	OGRLayerH l = GDALDatasetCreateLayer(h, name, srs, points ? wkbPoint : wkbPolygon, NULL);
	OSRRelease(srs);
	if (!l) { canopy_verr(err, n); return NULL; }
	const char *boxNames[] = {"image_path", "xmin", "ymin", "xmax", "ymax", "label", "score"};
	const OGRFieldType boxTypes[] = {OFTString, OFTReal, OFTReal, OFTReal, OFTReal, OFTString, OFTReal};
	const char *pointNames[] = {"image_path", "x", "y", "label", "score"};
	const OGRFieldType pointTypes[] = {OFTString, OFTReal, OFTReal, OFTString, OFTReal};
	const char **names = points ? pointNames : boxNames;
	const OGRFieldType *types = points ? pointTypes : boxTypes;
	for (int i = 0; i < (points ? 5 : 7); i++) {
		OGRFieldDefnH f = OGR_Fld_Create(names[i], types[i]);
		OGRErr e = OGR_L_CreateField(l, f, 1);
		OGR_Fld_Destroy(f);
		if (e != OGRERR_NONE) { canopy_verr(err, n); return NULL; }
	}
	return l;
}

// canopy_field adds a column after the others (a crop model's label,
// OFTString, or score, OFTReal).
static int canopy_field(OGRLayerH l, const char *name, int real, char *err, int n) {
	CPLErrorReset();
	OGRFieldDefnH f = OGR_Fld_Create(name, real ? OFTReal : OFTString);
	OGRErr e = OGR_L_CreateField(l, f, 1);
	OGR_Fld_Destroy(f);
	if (e != OGRERR_NONE) { canopy_verr(err, n); return 1; }
	return 0;
}

static OGRFeatureH canopy_new_feature(OGRLayerH l) { return OGR_F_Create(OGR_L_GetLayerDefn(l)); }

// canopy_feature adds one polygon (5 points, closed) with its values to f
// (canopy_new_feature's, its crop cells set), and destroys f.
static int canopy_feature(OGRLayerH l, OGRFeatureH f, const double *ring, const char *path, const double *v, const char *label, char *err, int n) {
	CPLErrorReset();
	OGR_F_SetFieldString(f, 0, path);
	for (int i = 0; i < 4; i++) OGR_F_SetFieldDouble(f, 1 + i, v[i]);
	OGR_F_SetFieldString(f, 5, label);
	OGR_F_SetFieldDouble(f, 6, v[4]);
	OGRGeometryH r = OGR_G_CreateGeometry(wkbLinearRing);
	for (int i = 0; i < 5; i++) OGR_G_AddPoint_2D(r, ring[2 * i], ring[2 * i + 1]);
	OGRGeometryH p = OGR_G_CreateGeometry(wkbPolygon);
	OGR_G_AddGeometryDirectly(p, r);
	OGR_F_SetGeometryDirectly(f, p);
	OGRErr e = OGR_L_CreateFeature(l, f);
	OGR_F_Destroy(f);
	if (e != OGRERR_NONE) { canopy_verr(err, n); return 1; }
	return 0;
}

// canopy_point_feature adds one point (xy, in the layer's CRS) with its
// image_path, x, y, label and score (v: x, y, score) to f, and destroys f.
static int canopy_point_feature(OGRLayerH l, OGRFeatureH f, const double *xy, const char *path, const double *v, const char *label, char *err, int n) {
	CPLErrorReset();
	OGR_F_SetFieldString(f, 0, path);
	OGR_F_SetFieldDouble(f, 1, v[0]);
	OGR_F_SetFieldDouble(f, 2, v[1]);
	OGR_F_SetFieldString(f, 3, label);
	OGR_F_SetFieldDouble(f, 4, v[2]);
	OGRGeometryH p = OGR_G_CreateGeometry(wkbPoint);
	OGR_G_SetPoint_2D(p, 0, xy[0], xy[1]);
	OGR_F_SetGeometryDirectly(f, p);
	OGRErr e = OGR_L_CreateFeature(l, f);
	OGR_F_Destroy(f);
	if (e != OGRERR_NONE) { canopy_verr(err, n); return 1; }
	return 0;
}

static int canopy_close(GDALDatasetH h, char *err, int n) {
	CPLErrorReset();
	GDALClose(h);
	if (CPLGetLastErrorType() >= CE_Failure) { canopy_verr(err, n); return 1; }
	return 0;
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// WriteGPKG writes a GeoPackage at path (which must not exist) with one
// polygon layer per entry of layers, each in its CRS.
func WriteGPKG(path string, layers []Layer) error {
	w, err := CreateGPKG(path)
	if err != nil {
		return err
	}
	for _, ly := range layers {
		if err := w.Add(ly); err != nil {
			return err
		}
	}
	return w.Close()
}

// GPKGWriter writes a GeoPackage one layer at a time (all in one
// transaction), so a caller holds one layer's features, not all.
type GPKGWriter struct {
	path string
	h    C.GDALDatasetH
	ebuf [errLen]C.char
}

// CreateGPKG starts a GeoPackage at path (which must not exist). Its
// gpkg_contents last_change is fixed (OGR_CURRENT_DATE, the Unix epoch),
// so the same layers make the same bytes.
func CreateGPKG(path string) (*GPKGWriter, error) {
	initGDAL()
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("gdal: %s exists", path)
	}
	fixDate()
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	w := &GPKGWriter{path: path}
	w.h = C.canopy_gpkg_create(cp, &w.ebuf[0], errLen)
	if w.h == nil {
		return nil, fmt.Errorf("gdal: create %s: %s", path, C.GoString(&w.ebuf[0]))
	}
	if C.GDALDatasetStartTransaction(w.h, 0) != C.OGRERR_NONE {
		return nil, w.fail("start transaction")
	}
	return w, nil
}

var dateOnce sync.Once

func fixDate() {
	dateOnce.Do(func() {
		k, v := C.CString("OGR_CURRENT_DATE"), C.CString("1970-01-01T00:00:00.000Z")
		C.CPLSetConfigOption(k, v)
		C.free(unsafe.Pointer(k))
		C.free(unsafe.Pointer(v))
	})
}

// fail closes the dataset after an error (the file is the caller's to remove).
func (w *GPKGWriter) fail(what string) error {
	msg := C.GoString(&w.ebuf[0])
	if w.h != nil {
		C.GDALClose(w.h)
		w.h = nil
	}
	return fmt.Errorf("gdal: %s: %s: %s", w.path, what, msg)
}

// Add writes one polygon layer (a point layer when ly.Points).
func (w *GPKGWriter) Add(ly Layer) error {
	if w.h == nil {
		return fmt.Errorf("gdal: %s: closed", w.path)
	}
	name, wkt := C.CString(ly.Name), C.CString(ly.CRS)
	points := C.int(0)
	if ly.Points {
		points = 1
	}
	l := C.canopy_layer(w.h, name, wkt, points, &w.ebuf[0], errLen)
	C.free(unsafe.Pointer(name))
	C.free(unsafe.Pointer(wkt))
	if l == nil {
		return w.fail("layer " + ly.Name)
	}
	for k, c := range ly.CropColumns {
		cc := C.CString(c)
		rc := C.canopy_field(l, cc, C.int(k%2), &w.ebuf[0], errLen)
		C.free(unsafe.Pointer(cc))
		if rc != 0 {
			return w.fail("column " + c)
		}
	}
	for _, f := range ly.Features {
		if len(f.CropLabels) != len(f.CropScores) || len(f.CropLabels) != 0 && 2*len(f.CropLabels) != len(ly.CropColumns) {
			C.GDALClose(w.h)
			w.h = nil
			return fmt.Errorf("gdal: %s: a feature with %d crop labels and %d scores for the columns %v", w.path, len(f.CropLabels), len(f.CropScores), ly.CropColumns)
		}
		feat := C.canopy_new_feature(l)
		if ly.Points {
			xy := [2]C.double{C.double(f.Ring[0][0]), C.double(f.Ring[0][1])}
			v := [3]C.double{C.double(f.Xmin), C.double(f.Ymin), C.double(f.Score)}
			if err := w.put(f, func(ip, lb *C.char) C.int {
				return C.canopy_point_feature(l, feat, &xy[0], ip, &v[0], lb, &w.ebuf[0], errLen)
			}); err != nil {
				return err
			}
			continue
		}
		for k := range f.CropLabels {
			cl := C.CString(f.CropLabels[k])
			C.OGR_F_SetFieldString(feat, C.int(7+2*k), cl)
			C.free(unsafe.Pointer(cl))
			C.OGR_F_SetFieldDouble(feat, C.int(8+2*k), C.double(f.CropScores[k]))
		}
		var ring [10]C.double
		for i, p := range f.Ring {
			ring[2*i], ring[2*i+1] = C.double(p[0]), C.double(p[1])
		}
		v := [5]C.double{C.double(f.Xmin), C.double(f.Ymin), C.double(f.Xmax), C.double(f.Ymax), C.double(f.Score)}
		if err := w.put(f, func(ip, lb *C.char) C.int {
			return C.canopy_feature(l, feat, &ring[0], ip, &v[0], lb, &w.ebuf[0], errLen)
		}); err != nil {
			return err
		}
	}
	return nil
}

// put writes one feature through write (vector.c's point or polygon
// writer), handing it f's image path and label as C strings, freed after;
// a nonzero status is the writer's failure.
func (w *GPKGWriter) put(f Feature, write func(ip, lb *C.char) C.int) error {
	ip, lb := C.CString(f.ImagePath), C.CString(f.Label)
	rc := write(ip, lb)
	C.free(unsafe.Pointer(ip))
	C.free(unsafe.Pointer(lb))
	if rc != 0 {
		return w.fail("feature")
	}
	return nil
}

// Close commits and closes the file.
func (w *GPKGWriter) Close() error {
	if w.h == nil {
		return fmt.Errorf("gdal: %s: closed", w.path)
	}
	if C.GDALDatasetCommitTransaction(w.h) != C.OGRERR_NONE {
		return w.fail("commit")
	}
	h := w.h
	w.h = nil
	if C.canopy_close(h, &w.ebuf[0], errLen) != 0 {
		return fmt.Errorf("gdal: %s: close: %s", w.path, C.GoString(&w.ebuf[0]))
	}
	return nil
}
