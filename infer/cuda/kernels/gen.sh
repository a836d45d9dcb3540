#!/bin/sh
# gen.sh (go generate): kernels.cu -> kernels.fatbin and nhwc.cu -> nhwc.fatbin with Debian's nvcc 11.8:
# PTX for compute_80 (JIT-compiled by newer drivers for any sm_80+ GPU) and
# machine code for sm_90 (H100/H200). --fmad=false: no contraction beyond the
# explicit fmaf calls, so the host shim computes conv_f32 bit for bit.
set -eu
cd "$(dirname "$0")"
for k in kernels nhwc; do
	nvcc -fatbin -O3 --fmad=false \
		-gencode arch=compute_80,code=compute_80 \
		-gencode arch=compute_90,code=sm_90 \
		-o $k.fatbin $k.cu
done
