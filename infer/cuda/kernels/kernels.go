// Package kernels holds canopy's CUDA kernels (kernels.cu), their compiled
// module (kernels.fatbin: compute_80 PTX plus sm_90 machine code, made by
// go generate with Debian's nvcc 11.8 and committed) and the launch geometry
// every launcher uses: the cuda backend on a GPU and the host shim
// (infer/cuda/hostkern) in CI. It is pure Go and imports no CUDA.
package kernels

import _ "embed"

//go:generate sh gen.sh

// Fatbin is the module the cuda backend loads (cuModuleLoadFatBinary).
//
//go:embed kernels.fatbin
var Fatbin []byte

// NHWCFatbin is the module of nhwc.cu, the cuDNN path's data-movement
// kernels (loaded beside Fatbin).
//
//go:embed nhwc.fatbin
var NHWCFatbin []byte

// NHWCNames are nhwc.cu's kernels, in cuda.NHWCOp order.
var NHWCNames = []string{"to_nhwc", "to_nchw", "maxpool3s2_nhwc", "upsample_add_nhwc", "relu_copy_any"}

// Tile sizes, as kernels.cu #defines them (TestDefinesAgree).
const (
	ConvBM, ConvBN, ConvBK, ConvThreads = 64, 64, 16, 256
	TCBM, TCBN, TCBK, TCThreads         = 64, 64, 16, 128
	ElemThreads                         = 256
)

// Names of the kernels (extern "C" in kernels.cu).
const (
	ConvF32     = "conv_f32"
	ConvTF32    = "conv_tf32"
	MaxPool3s2  = "maxpool3s2"
	UpsampleAdd = "upsample_add"
	ReluCopy    = "relu_copy"
	// TransformImg is one image's normalize, resize and pad
	// (retinanet's transform on the device).
	TransformImg = "transform_img"
	// The postprocess: scores and keys per level, the segmented bitonic
	// sort, box decoding, the merge of the levels, batched NMS.
	PostKeys    = "post_keys"
	BitonicStep = "bitonic_step"
	PostDecode  = "post_decode"
	PostMerge   = "post_merge"
	PostNMSPrep = "post_nms_prep"
	PostNMSMask = "post_nms_mask"
	PostNMSScan = "post_nms_scan"
	// The validation losses: matching, the low-quality rule, per-channel
	// sums, the per-image result; fill_u32 clears their counters.
	FillU32   = "fill_u32"
	LossMatch = "loss_match"
	LossLowQ  = "loss_lowq"
	LossSums  = "loss_sums"
	LossFinal = "loss_final"
	// TreeFormer's layers beyond its convolutions (infer/treeformer's
	// GPU runner): LayerNorm, the Mix-FFN's depthwise 3×3 and GELU, the
	// attention's strided batched GEMM and its float32 softmax, bilinear
	// ×2 (align_corners), the channel attention's mean, gate and scale,
	// and an add.
	TFLayerNorm  = "tf_layernorm"
	TFDWConvGELU = "tf_dwconv_gelu"
	TFGemm       = "tf_gemm"
	TFSoftmax    = "tf_softmax"
	TFUpsample2  = "tf_upsample2"
	TFChanMean   = "tf_chan_mean"
	TFCAGate     = "tf_ca_gate"
	TFScaleChan  = "tf_scale_chan"
	TFAdd        = "tf_add"
	// The crop classifier (infer/crop): each crop's cut, normalize and
	// width pass, its height pass into the batch, then the pool, fc and
	// softmax with the argmax.
	CropHPass   = "crop_hpass"
	CropVPass   = "crop_vpass"
	CropPool    = "crop_pool"
	CropFC      = "crop_fc"
	CropSoftmax = "crop_softmax"
)

// PostCand is the floats per candidate and per detection of the
// postprocess (box[4], score, label); PostLevels the pyramid levels.
const (
	PostCand   = 6
	PostLevels = 5
)

// Names lists every kernel the module must export.
var Names = []string{ConvF32, ConvTF32, MaxPool3s2, UpsampleAdd, ReluCopy, TransformImg,
	PostKeys, BitonicStep, PostDecode, PostMerge, PostNMSPrep, PostNMSMask, PostNMSScan,
	FillU32, LossMatch, LossLowQ, LossSums, LossFinal,
	TFLayerNorm, TFDWConvGELU, TFGemm, TFSoftmax, TFUpsample2, TFChanMean, TFCAGate, TFScaleChan, TFAdd,
	CropHPass, CropVPass, CropPool, CropFC, CropSoftmax}

// Dim is a launch's grid and block size (x only for blocks).
type Dim struct {
	GridX, GridY, Block int
}

// Conv is the launch of a convolution writing m output channels over ncol
// columns (batch × OH × OW), strict FP32 or TF32.
func Conv(m, ncol int, tf32 bool) Dim {
	if tf32 {
		return Dim{ceilDiv(ncol, TCBN), ceilDiv(m, TCBM), TCThreads}
	}
	return Dim{ceilDiv(ncol, ConvBN), ceilDiv(m, ConvBM), ConvThreads}
}

// Elem is the launch of an elementwise kernel over n outputs.
func Elem(n int) Dim { return Dim{ceilDiv(n, ElemThreads), 1, ElemThreads} }

func ceilDiv(a, b int) int { return (a + b - 1) / b }
