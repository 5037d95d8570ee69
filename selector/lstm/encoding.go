package lstm

import (
	"encoding/binary"
	"fmt"
	"math"
)

// magic starts a marshalled model; the last byte is the format version.
const magic = "FLLSTM\x00\x01"

// MarshalBinary encodes the model: magic and version, Hidden and Window
// (uint32), the four normalisation constants and every weight (float64),
// little-endian. It is for keeping a trained model (the gateway keeps it
// in its bbolt file) and loading it with UnmarshalBinary; the training
// options are not kept.
func (m *Model) MarshalBinary() ([]byte, error) {
	if !m.trained {
		return nil, fmt.Errorf("%w: not trained", ErrBadModel)
	}
	b := make([]byte, 0, len(magic)+8+8*(4+len(m.p)))
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(m.hidden))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.window))
	for _, f := range [...]float64{m.qMean, m.qSD, m.dtMean, m.dtSD} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	for _, f := range m.p {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return b, nil
}

// UnmarshalBinary replaces the model with one MarshalBinary encoded. It
// rejects, with [ErrBadModel], data of another format or version, of
// the wrong length, or with a weight that is not finite.
func (m *Model) UnmarshalBinary(data []byte) error {
	if len(data) < len(magic)+8+32 || string(data[:len(magic)]) != magic {
		return fmt.Errorf("%w: not an lstm model of format %d", ErrBadModel, magic[len(magic)-1])
	}
	d := data[len(magic):]
	h, win := binary.LittleEndian.Uint32(d), binary.LittleEndian.Uint32(d[4:])
	if h == 0 || h > 1024 || win == 0 || win > 1<<16 {
		return fmt.Errorf("%w: hidden %d, window %d", ErrBadModel, h, win)
	}
	d = d[8:]
	np := params(int(h))
	if len(d) != 8*(4+np) {
		return fmt.Errorf("%w: %d bytes of weights for %d units, want %d", ErrBadModel, len(d), h, 8*(4+np))
	}
	f := make([]float64, 4+np)
	for i := range f {
		f[i] = math.Float64frombits(binary.LittleEndian.Uint64(d[8*i:]))
		if math.IsNaN(f[i]) || math.IsInf(f[i], 0) {
			return fmt.Errorf("%w: value %d is %v", ErrBadModel, i, f[i])
		}
	}
	if f[1] <= 0 || f[3] <= 0 {
		return fmt.Errorf("%w: standard deviation ≤ 0", ErrBadModel)
	}
	m.hidden, m.window = int(h), int(win)
	m.opt.Hidden, m.opt.Window = m.hidden, m.window
	m.qMean, m.qSD, m.dtMean, m.dtSD = f[0], f[1], f[2], f[3]
	m.p = f[4:]
	m.trained = true
	return nil
}
