package eval

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/retinanet"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/imagesrun"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/parts"
)

// packetSeed is a packet rank 0 sends: every field set, each to a
// different value, so that two fields read in each other's place differ.
func packetSeed() shared {
	return shared{Inputs: Inputs{CSV: []byte("image_path,xmin,ymin,xmax,ymax,label\n"), Preds: []byte("preds"), Labels: []byte("label,id\nTree,0\n"), TruthFolder: true},
		saved:    imagesrun.Saved{Probe: "nonce", Attempt: 2, Parts: []parts.File{{Name: "part 0", Data: []byte("part bytes")}, {Name: "part 1", Data: []byte("more")}}},
		modelDir: "/m", modelDigest: "abc", modelConfig: "cfg"}
}

// unpackInputs reads what packInputs wrote, field for field.
func TestInputPacketRoundTrip(t *testing.T) {
	want := packetSeed()
	got, err := unpackInputs(packFields(want))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unpacked\n%+v\nwant\n%+v", got, want)
	}
}

func packFields(in shared) []byte { return collective.PackFields([]byte{0}, in.fields()...) }

// A VOC-folder flag other than one byte 0 or 1 is a malformed broadcast
// (exit 1), not read as true.
func TestInputPacketMalformedFlag(t *testing.T) {
	for _, flag := range [][]byte{{2}, {}, {1, 0}} {
		f := packetSeed().fields()
		f[6] = flag
		_, err := unpackInputs(collective.PackFields([]byte{0}, f...))
		if errkind.Code(err) != errkind.ExitInternal || !strings.Contains(fmt.Sprint(err), "malformed input broadcast") {
			t.Errorf("VOC-folder flag %v: %v (exit %d), want exit %d, a malformed broadcast", flag, err, errkind.Code(err), errkind.ExitInternal)
		}
	}
}

// FuzzInputPacket: rank 0's broadcast packet. Any bytes unpack without
// panic, to inputs or an error carrying an exit code; what unpacks packs
// back to the same bytes.
func FuzzInputPacket(f *testing.F) {
	f.Add(packFields(packetSeed()))
	f.Add(append([]byte{byte(errkind.ExitInput)}, "jobs: bad csv"...))
	f.Add([]byte{0, 1, 0, 0})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		in, err := unpackInputs(pkt)
		if err != nil {
			if len(pkt) > 0 && pkt[0] != 0 && errkind.Code(err) != int(pkt[0]) {
				t.Fatalf("error packet with code %d gives exit %d", pkt[0], errkind.Code(err))
			}
			return
		}
		if again := packFields(in); !bytes.Equal(again, pkt) {
			t.Fatalf("repacked %q as %q", pkt, again)
		}
	})
}

// The manifest names the detector's resize rule and blend, so a --resume
// with another refuses (the detections would differ).
func TestManifestNamesResizeAndBlend(t *testing.T) {
	a := evalManifest(Config{Model: modelsel.ModelConfig{Spec: "m"}}, shared{})
	b := evalManifest(Config{Model: modelsel.ModelConfig{Spec: "m", Resize: retinanet.ResizeTorchvision015}}, shared{})
	if d := a.Diff(b); len(d) != 1 || !strings.Contains(d[0], "torchvision-0.15") {
		t.Errorf("manifest diff between the rules: %q", d)
	}
	c := evalManifest(Config{Model: modelsel.ModelConfig{Spec: "m", Blend: retinanet.BlendNoFMA}}, shared{})
	if d := a.Diff(c); len(d) != 1 || !strings.Contains(d[0], "no-fma") {
		t.Errorf("manifest diff between the blends: %q", d)
	}
}
