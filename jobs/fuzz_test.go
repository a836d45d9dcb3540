package jobs

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/canopy-hpc/canopy/internal/collective"
)

// FuzzInputPacket: rank 0's broadcast packet. Any bytes unpack without
// panic, to inputs or an error carrying an exit code; what unpacks packs
// back to the same bytes.
func FuzzInputPacket(f *testing.F) {
	f.Add(collective.PackFields([]byte{0}, []byte("image_path\n"), nil, []byte("Tree,0\n"), []byte("nonce"),
		binary.LittleEndian.AppendUint64(nil, 2), []byte("/m"), []byte("abc"), []byte(""), []byte("part bytes")))
	f.Add(append([]byte{byte(ExitInput)}, "jobs: bad csv"...))
	f.Add([]byte{0, 1, 0, 0})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		in, err := unpackInputs(pkt)
		if err != nil {
			if len(pkt) > 0 && pkt[0] != 0 && Code(err) != int(pkt[0]) {
				t.Fatalf("error packet with code %d gives exit %d", pkt[0], Code(err))
			}
			return
		}
		fields := [][]byte{in.CSV, in.Preds, in.Labels, []byte(in.saved.Probe), binary.LittleEndian.AppendUint64(nil, uint64(in.saved.Attempt)),
			[]byte(in.modelDir), []byte(in.modelDigest), []byte(in.modelConfig)}
		for _, p := range in.saved.Parts {
			fields = append(fields, p.Data)
		}
		if again := collective.PackFields([]byte{0}, fields...); !bytes.Equal(again, pkt) {
			t.Fatalf("repacked %q as %q", pkt, again)
		}
	})
}
