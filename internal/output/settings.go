package output

import (
	"github.com/canopy-hpc/canopy/internal/config"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/modelsel"
)

// RunConfig is --config and its key=value overrides as the command layer
// parsed and resolved them: the file, the parsed config (its Ignored keys)
// and each setting with its source; a setting without a source is left to
// the model or the default (Finish settles it).
type RunConfig struct {
	File     string
	C        *config.Config
	Settings map[string]Setting
}

// Finish settles the settings left to the model or the defaults, from the
// loaded model's options (m nil: none), and returns the report's map.
func (rc *RunConfig) Finish(m *modelsel.Info) map[string]Setting {
	if rc == nil {
		return nil
	}
	out := make(map[string]Setting, len(rc.Settings))
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

// SettingsRecord is what a report.json records of the run's settings and
// crop models, the same fields in eval's, predict's and a tile run's.
type SettingsRecord struct {
	// Config is --config's file, Settings the resolved settings with
	// their sources, ConfigIgnored the config keys canopy did not use
	// (with --config or key=value overrides only).
	Config        string             `json:"config,omitempty"`
	Settings      map[string]Setting `json:"settings,omitempty"`
	ConfigIgnored []string           `json:"config_ignored,omitempty"`
	// CropModels and Crops: the --crop-model stage, when given.
	CropModels []cropstage.ModelInfo `json:"crop_models,omitempty"`
	Crops      *cropstage.Stats      `json:"crops,omitempty"`
}

// SetConfig records rc (nil: nothing), its settings settled with the
// model m.
func (r *SettingsRecord) SetConfig(rc *RunConfig, m *modelsel.Info) {
	if rc != nil {
		r.Config, r.ConfigIgnored = rc.File, rc.C.Ignored
		r.Settings = rc.Finish(m)
	}
}

// SetCrops records the crop stage (cs nil: none).
func (r *SettingsRecord) SetCrops(cs *cropstage.Set) {
	if cs != nil {
		r.CropModels, r.Crops = cs.Info, &cs.Stats
	}
}
