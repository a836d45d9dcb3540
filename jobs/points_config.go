package jobs

import (
	"fmt"
	"sort"

	"github.com/canopy-hpc/canopy/internal/config"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/jobs/points"
	"github.com/urfave/cli/v2"
)

// pointRunConfig applies --config and the key=value overrides (DeepForest's
// schema, as for the box models) to a point model's predict: score_thresh
// is the peaks' threshold_rel, with --tile patch_size and patch_overlap
// are the windows, and label_dict stands for --label-dict; the flags beat
// them. The schema's other keys (nms_thresh, detections_per_img, …) mean
// nothing to a point model and are listed in report.json's config
// "ignored". It returns the report's config section (nil without a config).
func pointRunConfig(c *cli.Context, command string, cfg *points.Config) (*points.RunConfig, error) {
	rc, err := noArgsRunConfig(c, command)
	if err != nil || rc == nil {
		return nil, err
	}
	cf := rc.C
	thr := float64(cfg.ScoreThresh)
	rc.resolveFloat(c, "score-thresh", "score_thresh", cf.ScoreThresh, &thr, "0.3")
	if !(thr >= 0 && thr <= 1) || (thr == 0 && cf.ScoreThresh.Src != "" && !c.IsSet("score-thresh")) {
		return nil, usageError(fmt.Errorf("%s: score_thresh %v: a point model's threshold (relative to the density map's maximum) is in (0, 1]", command, thr))
	}
	cfg.ScoreThresh = float32(thr)
	if cfg.Tile {
		rc.resolveInt(c, "patch-size", "patch_size", cf.PatchSize, &cfg.Settings.Patch)
		rc.resolveFloat(c, "patch-overlap", "patch_overlap", cf.PatchOverlap, &cfg.Settings.Overlap, fstr(cfg.Settings.Overlap))
	}
	if b := rc.labelCSV(c); b != nil {
		m, err := dataset.ParseLabelDict(rc.labelSource(), b)
		if err != nil {
			return nil, &Error{Code: ExitInput, Collective: true, Err: err}
		}
		cfg.LabelDict = modelsel.LabelDictOf(m)
	}
	ignored := append([]string(nil), cf.Ignored...)
	for k, src := range map[string]config.Source{"nms_thresh": cf.NMSThresh.Src, "detections_per_img": cf.DetectionsPerImg.Src,
		"topk_candidates": cf.TopkCandidates.Src, "num_classes": cf.NumClasses.Src, "batch_size": cf.BatchSize.Src,
		"model.name": cf.ModelName.Src, "model.revision": cf.ModelRevision.Src} {
		if src != "" {
			ignored = append(ignored, k)
		}
	}
	sort.Strings(ignored)
	out := &points.RunConfig{File: rc.File, Overrides: rc.Overrides, Settings: map[string]points.Setting{}, Ignored: ignored}
	for k, s := range rc.Settings {
		if s.Source != "" {
			out.Settings[k] = points.Setting{Value: s.Value, Source: string(s.Source)}
		}
	}
	return out, nil
}
