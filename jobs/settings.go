package jobs

// --config config.yaml and trailing key=value overrides (DeepForest's
// schema, internal/config) for eval and predict: parsed once into typed
// values, then each setting resolved by the rule flag > override > config >
// model > default, and recorded with its source for the report.

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"

	"github.com/canopy-hpc/canopy/internal/config"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/urfave/cli/v2"
)

// configFlag is eval's and predict's --config.
func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", Usage: "a DeepForest config.yaml (its schema: score_thresh, nms_thresh, detections_per_img, topk_candidates, batch_size, num_classes, label_dict, model.name/revision, and for eval validation.csv_file, root_dir, iou_threshold; with --tile also patch_size, patch_overlap and nms_thresh as --tile-iou, as DeepForest's CLI --mode tile); trailing key=value arguments override it as on DeepForest's CLI (validation.iou_threshold=0.5), canopy's own flags beat both; keys canopy does not use are listed in the report's config_ignored; a misspelt key is an error (exit 2). With a point model (TreeFormer, predict only): score_thresh is the peaks' threshold, with --tile patch_size and patch_overlap the windows, label_dict as --label-dict; the box keys are listed as ignored"}
}

// setting is one resolved setting and where it came from.
type setting = output.Setting

// runConfig is the run's config file and overrides, parsed.
type runConfig struct {
	File      string
	Overrides []string
	C         *config.Config
	// Settings are the resolved settings by key (report.json's
	// settings); "model or default" ones are settled when the model is
	// known (finishSettings).
	Settings map[string]setting
}

// splitOverrides separates key=value overrides from the positional
// arguments; an argument meant as an override but malformed (=0.3,
// score-thresh=0.3, +score_thresh=…, a bare known key that names no file)
// is an error naming the nearest key, never taken for the CSV.
func splitOverrides(args []string) (pos, overrides []string, err error) {
	for _, a := range args {
		if config.IsOverride(a) {
			overrides = append(overrides, a)
			continue
		}
		_, statErr := os.Lstat(a)
		if err := config.MalformedOverride(a, statErr == nil); err != nil {
			return nil, nil, err
		}
		pos = append(pos, a)
	}
	return pos, overrides, nil
}

// noArgsRunConfig is loadRunConfig for a command that takes no positional
// arguments but key=value overrides (predict, predict --tile): a usage
// error otherwise, the message starting with "predict".
func noArgsRunConfig(c *cli.Context, command string) (*runConfig, error) {
	rc, pos, err := loadRunConfig(c, command, c.Args().Slice())
	if err != nil {
		return nil, usageError(fmt.Errorf("predict: %w", err))
	}
	if len(pos) > 0 {
		return nil, usageError(fmt.Errorf("%s takes no arguments but key=value overrides, got %q", command, pos))
	}
	return rc, nil
}

// loadRunConfig reads --config and the overrides among args (nil, args
// when neither is given).
func loadRunConfig(c *cli.Context, command string, args []string) (*runConfig, []string, error) {
	pos, overrides, err := splitOverrides(args)
	if err != nil {
		return nil, nil, err
	}
	file := c.String("config")
	if file == "" && len(overrides) == 0 {
		return nil, pos, nil
	}
	var data []byte
	if file != "" {
		fi, err := os.Stat(file)
		if err != nil {
			return nil, pos, fmt.Errorf("--config: %w", err)
		}
		if !fi.Mode().IsRegular() || fi.Size() > config.MaxFile {
			return nil, pos, fmt.Errorf("--config %s: not a regular file of at most %d bytes", file, config.MaxFile)
		}
		if data, err = os.ReadFile(file); err != nil {
			return nil, pos, fmt.Errorf("--config: %w", err)
		}
	}
	cf, err := config.Load(file, data, overrides, command)
	if err != nil {
		return nil, pos, err
	}
	return &runConfig{File: file, Overrides: overrides, C: cf, Settings: map[string]setting{}}, pos, nil
}

func fstr(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// resolveFloat applies flag > config (or override) for a float setting;
// unset, def is the value ("" for "model or default").
func (rc *runConfig) resolveFloat(c *cli.Context, flag, key string, cv config.Float, dst *float64, def string) {
	switch {
	case c.IsSet(flag):
		rc.Settings[key] = setting{Value: fstr(*dst), Source: config.Flag}
	case cv.Src != "":
		*dst = cv.V
		rc.Settings[key] = setting{Value: fstr(cv.V), Source: cv.Src}
	case def != "":
		rc.Settings[key] = setting{Value: def, Source: config.Default}
	default:
		rc.Settings[key] = setting{}
	}
}

func (rc *runConfig) resolveInt(c *cli.Context, flag, key string, cv config.Int, dst *int) {
	switch {
	case flag != "" && c.IsSet(flag):
		rc.Settings[key] = setting{Value: strconv.Itoa(*dst), Source: config.Flag}
	case cv.Src != "":
		*dst = cv.V
		rc.Settings[key] = setting{Value: strconv.Itoa(cv.V), Source: cv.Src}
	default:
		rc.Settings[key] = setting{}
	}
}

// applyModel applies the settings of the model flags: score_thresh,
// nms_thresh, detections_per_img, topk_candidates, num_classes, and
// model.name@revision when neither --model nor replay is given.
func (rc *runConfig) applyModel(c *cli.Context, mc *ModelConfig, replay bool) {
	cf := rc.C
	if mc.Spec == "" && !replay && cf.ModelName.Src != "" {
		mc.Spec = cf.ModelName.V
		if cf.ModelRevision.Src != "" {
			mc.Spec += "@" + cf.ModelRevision.V
		}
		rc.Settings["model.name"] = setting{Value: cf.ModelName.V, Source: cf.ModelName.Src}
	}
	rc.resolveFloat(c, "score-thresh", "score_thresh", cf.ScoreThresh, &mc.ScoreThresh, "")
	rc.resolveFloat(c, "nms-thresh", "nms_thresh", cf.NMSThresh, &mc.NMSThresh, "")
	rc.resolveInt(c, "", "detections_per_img", cf.DetectionsPerImg, &mc.DetectionsPerImg)
	rc.resolveInt(c, "", "topk_candidates", cf.TopkCandidates, &mc.TopkCandidates)
	if cf.NumClasses.Src != "" {
		mc.NumClasses = cf.NumClasses.V
		rc.Settings["num_classes"] = setting{Value: strconv.Itoa(cf.NumClasses.V), Source: cf.NumClasses.Src}
	}
}

// ignoreModelKeys lists the model settings the config gave among the
// ignored keys (a replay run has no model).
func (rc *runConfig) ignoreModelKeys() {
	cf := rc.C
	for k, src := range map[string]config.Source{"score_thresh": cf.ScoreThresh.Src, "nms_thresh": cf.NMSThresh.Src,
		"detections_per_img": cf.DetectionsPerImg.Src, "topk_candidates": cf.TopkCandidates.Src, "num_classes": cf.NumClasses.Src,
		"model.name": cf.ModelName.Src, "model.revision": cf.ModelRevision.Src} {
		if src != "" {
			cf.Ignored = append(cf.Ignored, k)
		}
	}
	sort.Strings(cf.Ignored)
}

// labelCSV is the config's label_dict as label,id CSV bytes (the form
// --label-dict reads), nil when the config has none or --label-dict is
// given.
func (rc *runConfig) labelCSV(c *cli.Context) []byte {
	if c.IsSet("label-dict") {
		if rc.C.LabelDict.Src != "" {
			rc.Settings["label_dict"] = setting{Value: c.String("label-dict"), Source: config.Flag}
		}
		return nil
	}
	ld := rc.C.LabelDict
	if ld.Src == "" {
		return nil
	}
	names := make([]string, 0, len(ld.V))
	for k := range ld.V {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		return ld.V[names[i]] < ld.V[names[j]] || (ld.V[names[i]] == ld.V[names[j]] && names[i] < names[j])
	})
	var b bytes.Buffer
	b.WriteString("label,id\n")
	for _, n := range names {
		fmt.Fprintf(&b, "%s,%d\n", dataset.CSVField(n), ld.V[n])
	}
	rc.Settings["label_dict"] = setting{Value: b.String(), Source: ld.Src}
	return b.Bytes()
}

// labelSource names where the config's label_dict came from, for the
// report's inputs and the messages: "FILE: label_dict", or the override.
func (rc *runConfig) labelSource() string {
	if rc.C.LabelDict.Src == config.Override {
		return "the override label_dict=…"
	}
	return rc.File + ": label_dict"
}

// finishSettings settles the settings left to the model or the defaults,
// from the loaded model's options, and returns the report's map.
func (rc *runConfig) finishSettings(m *modelsel.Info) map[string]setting {
	if rc == nil {
		return nil
	}
	out := make(map[string]setting, len(rc.Settings))
	for k, s := range rc.Settings {
		if s.Source == "" && m != nil {
			s.Value = m.Thresholds[k]
			s.Source = config.Default
			for _, set := range m.ConfigSet {
				if len(set) > len(k) && set[:len(k)+1] == k+"=" {
					s.Source = config.Model
				}
			}
		}
		if s.Source != "" {
			out[k] = s
		}
	}
	return out
}
