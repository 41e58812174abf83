package casstore

import (
	"encoding/binary"

	"github.com/sluicehq/sluice/core"
)

// encodeKey returns the stored key of key under the algorithm named
// alg: alg's length as a uvarint, alg, then key, so that no two pairs
// share one. It is bytes, not text: a key may hold any bytes, NUL and
// invalid UTF-8 included, so a backend stores it as binary (PostgreSQL's
// bytea, MySQL's VARBINARY).
func encodeKey(key, alg string) []byte {
	b := binary.AppendUvarint(make([]byte, 0, 2+len(alg)+len(key)), uint64(len(alg)))
	return append(append(b, alg...), key...)
}

// stateWords is the number of 8-byte numbers of a state before its log.
const stateWords = 5

// encodeState packs st as big-endian int64s: Last, Vals[0], Vals[1],
// Vals[2], Expires, then each log entry's At and Cost.
func encodeState(st *core.State) []byte {
	b := make([]byte, 0, 8*(stateWords+2*len(st.Log)))
	for _, v := range [stateWords]int64{st.Last, st.Vals[0], st.Vals[1], st.Vals[2], st.Expires} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	for _, e := range st.Log {
		b = binary.BigEndian.AppendUint64(b, uint64(e.At))
		b = binary.BigEndian.AppendUint64(b, uint64(e.Cost))
	}
	return b
}

// decodeState unpacks what encodeState packed. It reports false, with the
// zero State, for bytes encodeState cannot have written (nil, a row
// absent, is the zero State and true).
func decodeState(b []byte) (core.State, bool) {
	var st core.State
	if b == nil {
		return st, true
	}
	if len(b) < 8*stateWords || (len(b)-8*stateWords)%16 != 0 {
		return core.State{}, false
	}
	word := func(i int) int64 { return int64(binary.BigEndian.Uint64(b[8*i:])) }
	st.Last, st.Vals[0], st.Vals[1], st.Vals[2], st.Expires = word(0), word(1), word(2), word(3), word(4)
	if n := (len(b) - 8*stateWords) / 16; n > 0 {
		st.Log = make([]core.LogEntry, n)
		for i := range st.Log {
			st.Log[i] = core.LogEntry{At: word(stateWords + 2*i), Cost: word(stateWords + 2*i + 1)}
		}
	}
	if st.Last < 0 || st.Expires < 0 {
		return core.State{}, false
	}
	return st, true
}
