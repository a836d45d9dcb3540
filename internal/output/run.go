package output

import (
	"encoding/json"
	"runtime/debug"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/config"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/report"
)

// Version is canopy's version, printed by `canopy version` and recorded in
// every report.
var Version = "0.1.0"

// GitRevision is the revision canopy was built from ("-dirty" appended
// for a modified tree; "unknown" without the build's VCS stamp).
func GitRevision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	return "unknown"
}

// Setting is one resolved setting and where it came from (report.json's
// settings).
type Setting struct {
	Value  string        `json:"value"`
	Source config.Source `json:"source"`
}

// RunInfo is eval's report.json "run" record (the HTML page reads it too).
type RunInfo struct {
	Canopy             string                 `json:"canopy"`
	Go                 string                 `json:"go"`
	MPI                string                 `json:"mpi"`
	Git                string                 `json:"git"`
	Command            []string               `json:"command"`
	Semantics          string                 `json:"semantics"`
	IoUThreshold       float64                `json:"iou_threshold"`
	Detector           string                 `json:"detector"`
	Ranks              int                    `json:"ranks"`
	Hosts              []string               `json:"hosts"`
	PerRank            []collective.RankStats `json:"per_rank"`
	Inputs             map[string]report.File `json:"inputs"`
	LabelMap           json.RawMessage        `json:"label_map"`
	Coverage           Coverage               `json:"coverage"`
	IgnoredPredictions int                    `json:"ignored_predictions"`
	Resume             ResumeInfo             `json:"resume"`
	Model              *modelsel.Info         `json:"model,omitempty"`
	// Outputs are the sha256 of the files published with this report, so a
	// reader can check that a predictions.csv or results.csv belongs to it.
	Outputs map[string]string `json:"outputs,omitempty"`
	// Warnings are the input warnings rank 0 printed.
	Warnings []string `json:"warnings,omitempty"`
	// AllowOutsideRoot records --allow-outside-root when it opened images:
	// with --model, or for report.html.
	AllowOutsideRoot bool `json:"allow_outside_root,omitempty"`
	// Config is --config's file, Settings the resolved settings with
	// their sources, ConfigIgnored the config keys canopy did not use
	// (with --config or key=value overrides only).
	Config        string             `json:"config,omitempty"`
	Settings      map[string]Setting `json:"settings,omitempty"`
	ConfigIgnored []string           `json:"config_ignored,omitempty"`
	// CropModels and Crops: the --crop-model stage, when given.
	CropModels []cropstage.ModelInfo `json:"crop_models,omitempty"`
	Crops      *cropstage.Stats      `json:"crops,omitempty"`
	// Geometry: "point" or "polygon" for those inputs (boxes: absent);
	// DistanceThreshold the points' match distance; GEOS the version of
	// the library that computed the polygon areas.
	Geometry          string  `json:"geometry,omitempty"`
	DistanceThreshold float64 `json:"distance_threshold,omitempty"`
	GEOS              string  `json:"geos,omitempty"`
}

// ResumeInfo tells how much of the run came from part files of earlier
// attempts (attempt 0 is a fresh run).
type ResumeInfo struct {
	Attempt        int `json:"attempt"`
	FromParts      int `json:"images_from_parts"`
	Computed       int `json:"images_computed"`
	RecordsDropped int `json:"part_records_dropped"`
}

// Coverage counts the images of the run and those processed.
type Coverage struct {
	Images    int `json:"images"`
	Processed int `json:"processed"`
}

// HostsOf lists the ranks' hosts once each, in rank order.
func HostsOf(stats []collective.RankStats) []string {
	var hosts []string
	seen := map[string]bool{}
	for _, s := range stats {
		if !seen[s.Host] {
			seen[s.Host] = true
			hosts = append(hosts, s.Host)
		}
	}
	return hosts
}
