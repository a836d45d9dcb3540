package modelsel

import "strconv"

// DetectorSettings are the settings of a model run a resume must share:
// the model's config.json and the threshold, resize and blend flags.
func DetectorSettings(mc ModelConfig, configDigest string) map[string]string {
	return map[string]string{
		"config_json_sha256": configDigest,
		"score_thresh_flag":  strconv.FormatFloat(mc.ScoreThresh, 'g', -1, 64),
		"nms_thresh_flag":    strconv.FormatFloat(mc.NMSThresh, 'g', -1, 64),
		"resize":             mc.Resize.String(),
		"blend":              mc.Blend.String(),
	}
}
