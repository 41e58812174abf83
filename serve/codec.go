package serve

import (
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// codec is the gRPC codec of a [Server]: gRPC's own protobuf codec, but
// for the requests of the RLS API in the shape Envoy sends them (a
// domain, descriptors of key and value entries, is_negative_hits and the
// request's hits_addend), which it reads itself, into one string and a
// few slices for all of a request's descriptors and entries: where
// protobuf allocates every descriptor, entry and string apart, about
// twenty allocations for three descriptors, it makes five. A request
// with anything else (a limit override, a descriptor's own hits_addend,
// a field it does not know, a string that is not UTF-8, bytes that do
// not parse) is read by protobuf, as before, so that every request
// decodes as protobuf decodes it.
type codec struct{ proto encoding.CodecV2 }

// newCodec returns the codec, over gRPC's protobuf codec.
func newCodec() codec { return codec{proto: encoding.GetCodecV2(protocodec.Name)} }

// Name is the content subtype the codec serves, protobuf's.
func (c codec) Name() string { return protocodec.Name }

// Marshal is protobuf's.
func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

// Unmarshal reads a RateLimitRequest of Envoy's shape itself, and
// anything else with protobuf.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*rlsv3.RateLimitRequest)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		b = data.Materialize()
	}
	if readRequest(b, req) {
		return nil
	}
	return proto.Unmarshal(b, req)
}

// The fields of the RLS API that readRequest reads (rls.proto,
// ratelimit.proto).
const (
	requestDomain      protowire.Number = 1 // RateLimitRequest.domain, string
	requestDescriptors protowire.Number = 2 // RateLimitRequest.descriptors, repeated RateLimitDescriptor
	requestHitsAddend  protowire.Number = 3 // RateLimitRequest.hits_addend, uint32
	descriptorEntries  protowire.Number = 1 // RateLimitDescriptor.entries, repeated Entry
	descriptorNegative protowire.Number = 4 // RateLimitDescriptor.is_negative_hits, bool
	entryKey           protowire.Number = 1 // Entry.key, string
	entryValue         protowire.Number = 2 // Entry.value, string
)

// readRequest decodes b into req, which must be empty, as protobuf would,
// and reports true; or reports false, leaving req empty, if b holds
// anything but the fields it reads, or does not parse: protobuf then
// decides. It makes one string of b, which every string of req shares,
// and a slice each of descriptors, entries and their pointers.
func readRequest(b []byte, req *rlsv3.RateLimitRequest) bool {
	// First the shape: how many descriptors and entries, and whether
	// everything is a field read here.
	var nd, ne int
	ok := walk(b, 0, func(num protowire.Number, typ protowire.Type, v []byte, _ int, _ uint64) bool {
		switch {
		case num == requestDomain && typ == protowire.BytesType:
			return utf8.Valid(v)
		case num == requestHitsAddend && typ == protowire.VarintType:
			return true
		case num == requestDescriptors && typ == protowire.BytesType:
			nd++
			return walk(v, 0, func(num protowire.Number, typ protowire.Type, v []byte, _ int, _ uint64) bool {
				switch {
				case num == descriptorNegative && typ == protowire.VarintType:
					return true
				case num == descriptorEntries && typ == protowire.BytesType:
					ne++
					return walk(v, 0, func(num protowire.Number, typ protowire.Type, v []byte, _ int, _ uint64) bool {
						return (num == entryKey || num == entryValue) && typ == protowire.BytesType && utf8.Valid(v)
					})
				}
				return false
			})
		}
		return false
	})
	if !ok {
		return false
	}
	// Then the request, its strings cut from one copy of b.
	s := string(b)
	dscs := make([]ratelimitv3.RateLimitDescriptor, nd)
	entries := make([]ratelimitv3.RateLimitDescriptor_Entry, ne)
	ptrs := make([]*ratelimitv3.RateLimitDescriptor_Entry, ne)
	if nd > 0 {
		req.Descriptors = make([]*ratelimitv3.RateLimitDescriptor, nd)
	}
	nd, ne = 0, 0
	walk(b, 0, func(num protowire.Number, _ protowire.Type, v []byte, off int, n uint64) bool {
		switch num {
		case requestDomain:
			req.Domain = s[off : off+len(v)]
		case requestHitsAddend:
			req.HitsAddend = uint32(n)
		case requestDescriptors:
			d := &dscs[nd]
			req.Descriptors[nd] = d
			nd++
			first := ne
			walk(v, off, func(num protowire.Number, _ protowire.Type, v []byte, off int, n uint64) bool {
				if num == descriptorNegative {
					d.IsNegativeHits = protowire.DecodeBool(n)
					return true
				}
				e := &entries[ne]
				ptrs[ne] = e
				ne++
				walk(v, off, func(num protowire.Number, _ protowire.Type, v []byte, off int, _ uint64) bool {
					if num == entryKey {
						e.Key = s[off : off+len(v)]
					} else {
						e.Value = s[off : off+len(v)]
					}
					return true
				})
				return true
			})
			if ne > first {
				d.Entries = ptrs[first:ne:ne]
			}
		}
		return true
	})
	return true
}

// walk calls f with each field of the message b, which begins at offset
// base of the outermost message: the field's number, its type, and its
// bytes and their offset (a length-delimited field's) or its value (a
// varint's). It stops and reports false when f does, or when b does not
// parse or holds a field of another type.
func walk(b []byte, base int, f func(num protowire.Number, typ protowire.Type, v []byte, off int, n uint64) bool) bool {
	at := 0
	for at < len(b) {
		num, typ, k := protowire.ConsumeTag(b[at:])
		if k < 0 {
			return false
		}
		at += k
		var v []byte
		var n uint64
		off := 0
		switch typ {
		case protowire.BytesType:
			v, k = protowire.ConsumeBytes(b[at:])
			off = base + at + k - len(v)
		case protowire.VarintType:
			n, k = protowire.ConsumeVarint(b[at:])
		default:
			return false
		}
		if k < 0 || !f(num, typ, v, off, n) {
			return false
		}
		at += k
	}
	return true
}
