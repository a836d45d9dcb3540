package cuda

import (
	"fmt"
	"math"
)

// Slots encodes a kernel's arguments as 8-byte slots, the form both
// launchers pass on (cuLaunchKernel reads each parameter's own size from
// its slot's start; the host shim converts each slot to the parameter's C
// type): a Ptr as the address, an int as a C int (low 4 bytes), an int64
// as a C long long, a float32 as its bits (low 4 bytes), a float64 as its
// bits.
func Slots(name string, args []any) ([]uint64, error) {
	out := make([]uint64, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case Ptr:
			out[i] = uint64(v)
		case int:
			if v != int(int32(v)) {
				return nil, fmt.Errorf("cuda: %s: argument %d (%d) does not fit a C int", name, i, v)
			}
			out[i] = uint64(uint32(int32(v)))
		case int64:
			out[i] = uint64(v)
		case float32:
			out[i] = uint64(math.Float32bits(v))
		case float64:
			out[i] = math.Float64bits(v)
		default:
			return nil, fmt.Errorf("cuda: %s: argument %d has type %T", name, i, a)
		}
	}
	return out, nil
}
