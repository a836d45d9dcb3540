#!/usr/bin/env bash
# Writes the committed seed corpora of canopy's fuzz targets
# (PKG/testdata/fuzz/FuzzX/seed-*), which `go test` (make test) runs and
# `make fuzz` starts from. Deterministic: run it again after changing a seed.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$GO build -o "$tmp/fuzzseed" ./cmd/fuzzseed
seed() { "$tmp/fuzzseed" "$@"; }
h=image_path,xmin,ymin,xmax,ymax,label
printf '%s\n' "$h" > "$tmp/header-only.csv"
printf '%s\n" a.png ",1,2,3,4,Tree\n\ta.png,0x1p4,1_0,+.5e1,1e400,Tree\n' "$h" > "$tmp/hostile.csv"
printf '%s,score\na.png,1,2,3,4,Tree,1.5\na.png,1,2,3,4,Tree,nan\na.png,1,2,3,4,Tree,-Infinity\n' "$h" > "$tmp/scores.csv"
printf 'label,id\nTree,0\nBird,1\n' > "$tmp/labels.csv"
printf 'Tree,1\nBird,1\n' > "$tmp/labels-dup.csv"

d=internal/dataset/testdata/fuzz
rm -rf $d
seed -dir $d/FuzzParseTruth testdata/sets/{three,edge,coco}/truth.csv "$tmp/header-only.csv" "$tmp/hostile.csv"
seed -dir $d/FuzzParsePredictions -then 'bool(false)' testdata/sets/{three,edge}/predictions.csv "$tmp/scores.csv"
seed -dir $d/FuzzParsePredictions -then 'bool(true)' testdata/sets/coco/predictions.csv "$tmp/scores.csv"
seed -dir $d/FuzzParseLabelDict testdata/sets/multi/label_dict.csv "$tmp/labels.csv" "$tmp/labels-dup.csv"
seed -dir $d/FuzzParseVOC internal/dataset/testdata/readfile/three-voc/{a,b,c}.xml internal/dataset/testdata/readfile/missing-field.xml
seed -dir $d/FuzzParseTruth internal/dataset/testdata/readfile/three-wkt.csv
g=jobs/testdata/geometry
seed -dir $d/FuzzParseGeoCSV -then 'bool(false)' $g/points_edge/{truth,preds}.csv
seed -dir $d/FuzzParseGeoCSV -then 'bool(true)' $g/polygons_edge/{truth,preds}.csv
seed -dir $d/FuzzParseWKT -kind string 'POINT (1.5 -2)' 'MULTIPOLYGON (((50 50, 55 50, 55 55, 50 55, 50 50)), ((60 50, 65 50, 65 55, 60 55, 60 50)))' \
	'POLYGON ((70 70, 90 70, 90 90, 70 90, 70 70), (75 75, 80 75, 80 80, 75 80, 75 75))' 'POLYGON EMPTY' 'POLYGON ((0 0, 1 0, 0 0)'
seed -dir $d/FuzzParseWKB internal/dataset/testdata/wkb/*.wkb

d=infer/safetensors/testdata/fuzz
rm -rf $d
seed -dir $d/FuzzParse infer/safetensors/testdata/small_{f32,f16,bf16}.safetensors

d=infer/torchfile/testdata/fuzz
rm -rf $d
seed -dir $d/FuzzRead infer/torchfile/testdata/{state_f16,state_proto4,param,overlap,noncontig,forbidden,eof_directory}.pt

d=internal/config/testdata/fuzz
rm -rf $d
seed -dir $d/FuzzLoad -then 'string("validation.iou_threshold=0.5")' internal/config/testdata/{full,eval}.yaml

d=infer/crop/testdata/fuzz
rm -rf $d
printf '{"cropmodel": {"label_dict": {"a": 0, "b": 2}, "resize": [224, 0], "expand": -1, "normalize": "yes"}}' > "$tmp/bad-crop-config.json"
seed -dir $d/FuzzParseConfig infer/crop/testdata/deepforest/hub-config.json "$tmp/bad-crop-config.json"

d=infer/modelfile/testdata/fuzz
rm -rf $d
printf '{"min_size": [640, 100000], "max_size": 0, "image_std": [0, 1, 1]}' > "$tmp/bad-config.json"
seed -dir $d/FuzzParseConfig testdata/models/canopy-demo-r18/config.json "$tmp/bad-config.json"
seed -dir $d/FuzzParseRepo -kind string weecology/deepforest-tree weecology/deepforest-bird@main \
	'a/b@../../etc' 'a/b@refs/pr/1' '../x/y' 'a/b/c' 'a/b@'

d=infer/imagefile/testdata/fuzz
rm -rf $d
seed -dir $d/FuzzRead infer/imagefile/testdata/{gray16.png,rgba16.png,rgb16be.tif,rgba16p.tif,gray16a.tif,cmyk.jpg,jpeg_444.jpg,packbits_rgb.tif}

d=internal/parts/testdata/fuzz
rm -rf $d
seed -dir $d/FuzzDecode -kind part -then 'int(4)' 3 0 5 1
seed -dir $d/FuzzDecode -kind part -then 'int(1)' 2

d=internal/records/testdata/fuzz
rm -rf $d
seed -dir $d/FuzzDecode -kind records 0 1 3 7 3@0 7@0

d=metrics/testdata/fuzz
rm -rf $d
seed -dir $d/FuzzParseThresholds -kind string 0.5 0.4,0.5,0.75 1,.25,5e-1 0.5,0.5 NaN -0 0x1p-1 ' 0.5' 0.5,,0.6

d=internal/pipeline/eval/testdata/fuzz
rm -rf $d
printf 'nonce' > "$tmp/probe"; printf '\x02\0\0\0\0\0\0\0' > "$tmp/attempt"; : > "$tmp/empty"; printf '\0' > "$tmp/false"
# eval's packet (internal/pipeline/eval, shared.fields): truth, predictions,
# label dict, model folder, digest and config, the VOC-folder flag, then the
# saved run (probe, attempt, part files)
seed -dir $d/FuzzInputPacket -kind packet testdata/sets/three/truth.csv testdata/sets/three/predictions.csv "$tmp/labels.csv" \
	"$tmp/empty" "$tmp/empty" "$tmp/empty" "$tmp/false" "$tmp/probe" "$tmp/attempt" "$tmp/empty"
cat > "$tmp/manifest.json" <<'JSON'
{
 "canopy": "0.1.0",
 "csv_sha256": "3f1e",
 "predictions_sha256": "e3b0",
 "label_dict_sha256": "",
 "detector": "retinanet weights sha256 9a8b",
 "detector_settings": {"config_json_sha256": "77", "nms_thresh_flag": "-1", "score_thresh_flag": "0.3"}
}
JSON
d=internal/imagesrun/testdata/fuzz
rm -rf $d
seed -dir $d/FuzzManifest "$tmp/manifest.json"
d=report/testdata/fuzz
seed -dir $d/FuzzCompareReport testdata/golden/demo/report.json report/testdata/compare/{baseline,per_class_reordered,classes_length_mismatch,not_a_report,sweep}.json
seed -dir $d/FuzzTolerances -kind string default=0.02 'map=0.01, box_recall=0' map=1e400 x=NaN x=-1 '=1' map_per_class=0x1p-4
