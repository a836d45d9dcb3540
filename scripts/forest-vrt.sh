#!/usr/bin/env bash
# scripts/forest-vrt.sh N [SRS GEOTRANSFORM]: prints a VRT of N x N pixels
# made of the 2000x2000 image src/img_0000.png (relative to the VRT's
# folder) repeated, bands 1-3; with SRS and GEOTRANSFORM ("a, b, c, d, e,
# f", GDAL's order) it is georeferenced. Used by bench-tile.sh and
# bench-skip-empty.sh.
set -euo pipefail
n=$1
k=$(((n + 1999) / 2000))
echo "<VRTDataset rasterXSize=\"$n\" rasterYSize=\"$n\">"
if [ $# -ge 3 ]; then
	echo "<SRS>$2</SRS><GeoTransform>$3</GeoTransform>"
fi
for b in 1 2 3; do
	echo "<VRTRasterBand dataType=\"Byte\" band=\"$b\">"
	for ((i = 0; i < k; i++)); do for ((j = 0; j < k; j++)); do
		echo "<SimpleSource><SourceFilename relativeToVRT=\"1\">src/img_0000.png</SourceFilename><SourceBand>$b</SourceBand><SrcRect xOff=\"0\" yOff=\"0\" xSize=\"2000\" ySize=\"2000\"/><DstRect xOff=\"$((i * 2000))\" yOff=\"$((j * 2000))\" xSize=\"2000\" ySize=\"2000\"/></SimpleSource>"
	done; done
	echo "</VRTRasterBand>"
done
echo "</VRTDataset>"
