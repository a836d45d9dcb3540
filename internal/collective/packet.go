package collective

import (
	"encoding/binary"
	"errors"

	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/mpi"
)

// BcastFields broadcasts rank 0's input packet (packFields after a zero
// status byte, or a non-zero exit code and its error text) and returns its
// fields on every rank: rank 0's error, the same on every rank, or at least
// min fields. Eval, predict and predict --tile read their inputs this way.
func BcastFields(c mpi.Comm, pkt []byte, min int) ([][]byte, error) {
	pkt, err := c.Bcast(pkt, 0)
	if err != nil {
		return nil, errkind.Local(errkind.ExitMPI, "jobs: broadcast inputs: %w", err)
	}
	return UnpackPacket(pkt, min)
}

// UnpackPacket is bcastFields' reading of the packet.
func UnpackPacket(pkt []byte, min int) ([][]byte, error) {
	if len(pkt) == 0 {
		return nil, errkind.Collective(errkind.ExitInternal, "jobs: empty input broadcast")
	}
	if pkt[0] != 0 {
		return nil, &errkind.Error{Code: int(pkt[0]), Collective: true, Err: errors.New(string(pkt[1:]))}
	}
	f, err := UnpackFields(pkt[1:])
	if err != nil || len(f) < min {
		return nil, errkind.Collective(errkind.ExitInternal, "jobs: malformed input broadcast")
	}
	return f, nil
}

// PackFields appends length-prefixed fields.
func PackFields(pkt []byte, fields ...[]byte) []byte {
	for _, f := range fields {
		pkt = binary.LittleEndian.AppendUint64(pkt, uint64(len(f)))
		pkt = append(pkt, f...)
	}
	return pkt
}

func UnpackFields(pkt []byte) ([][]byte, error) {
	var out [][]byte
	for len(pkt) > 0 {
		if len(pkt) < 8 {
			return nil, errors.New("jobs: truncated input broadcast")
		}
		n := binary.LittleEndian.Uint64(pkt)
		pkt = pkt[8:]
		if uint64(len(pkt)) < n {
			return nil, errors.New("jobs: truncated input broadcast")
		}
		out, pkt = append(out, pkt[:n:n]), pkt[n:]
	}
	return out, nil
}
