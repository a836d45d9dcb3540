package cudnn

// The cuDNN 9 graph-API values canopy uses, as cudnn_graph.h (cuDNN 9.28)
// defines them. The header is NVIDIA's and is not in this repository; these
// are the numbers of its enums, which are part of cuDNN 9's stable ABI.

// Status codes (cudnnStatus_t).
const (
	statusSuccess          = 0
	statusBadParam         = 2000
	statusNotSupported     = 3000
	statusExecutionFailed  = 5000
	statusBadParamNotFinal = 2004
)

// Data types (cudnnDataType_t).
const (
	dataFloat    = 0
	dataBFloat16 = 9
)

// Attribute value types (cudnnBackendAttributeType_t).
const (
	typeHandle       = 0
	typeDataType     = 1
	typeBoolean      = 2
	typeInt64        = 3
	typeFloat        = 4
	typeVoidPtr      = 6
	typeConvMode     = 7
	typeHeurMode     = 8
	typeKnobType     = 9
	typeNumNote      = 11
	typePointwise    = 14
	typeDescriptor   = 15
	typeChar         = 24
	crossCorrelation = 1 // cudnnConvolutionMode_t CUDNN_CROSS_CORRELATION
	heurModeA        = 3 // cudnnBackendHeurMode_t CUDNN_HEUR_MODE_A
	pointwiseAdd     = 0
	pointwiseRelu    = 100
)

// Descriptor types (cudnnBackendDescriptorType_t).
const (
	descPointwise   = 0
	descConvolution = 1
	descEngine      = 2
	descEngineCfg   = 3
	descEngineHeur  = 4
	descPlan        = 5
	descKnobChoice  = 7
	descConvFwdOp   = 10
	descPointwiseOp = 13
	descOpGraph     = 15
	descVariantPack = 16
	descTensor      = 17
)

// Attribute names (cudnnBackendAttributeName_t).
const (
	attrPointwiseMode     = 0
	attrPointwiseMathPrec = 1
	attrConvCompType      = 100
	attrConvMode          = 101
	attrConvDilations     = 102
	attrConvStrides       = 103
	attrConvPostPad       = 104
	attrConvPrePad        = 105
	attrConvSpatialDims   = 106
	attrHeurMode          = 200
	attrHeurOpGraph       = 201
	attrHeurResults       = 202
	attrCfgEngine         = 300
	attrCfgKnobChoices    = 302
	attrPlanHandle        = 400
	attrPlanEngineCfg     = 401
	attrPlanWorkspace     = 402
	attrPlanJSON          = 405
	attrKnobChoiceType    = 600
	attrKnobChoiceValue   = 601
	attrConvFwdAlpha      = 700
	attrConvFwdBeta       = 701
	attrConvFwdConvDesc   = 702
	attrConvFwdW          = 703
	attrConvFwdX          = 704
	attrConvFwdY          = 705
	attrPwOpDesc          = 750
	attrPwOpX             = 751
	attrPwOpB             = 752
	attrPwOpY             = 753
	attrGraphHandle       = 800
	attrGraphOps          = 801
	attrGraphEngineCount  = 802
	attrTensorAlignment   = 900
	attrTensorDataType    = 901
	attrTensorDims        = 902
	attrTensorStrides     = 903
	attrTensorUID         = 906
	attrTensorVirtual     = 907
	attrPackUIDs          = 1000
	attrPackPointers      = 1001
	attrPackWorkspace     = 1003
	attrEngineGraph       = 1300
	attrEngineIndex       = 1301
	attrEngineNumNotes    = 1303
)

// Numerical notes (cudnnBackendNumericalNote_t) and knob types
// (cudnnBackendKnobType_t) the engine filter reads.
const (
	noteTensorCore       = 0
	noteNondeterministic = 4

	KnobSplitK    = 0
	KnobSplitKBuf = 12
	KnobSplitKSlc = 17
	KnobStreamK   = 38
	KnobSplitPSlc = 39
)
