package serve

import (
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// codecSeeds are requests in the bytes Envoy sends, and in others: each
// field the codec reads, each it leaves to protobuf, fields given twice,
// a string that is not UTF-8, a field of the wrong type, truncated bytes.
func codecSeeds(t testing.TB) [][]byte {
	t.Helper()
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	plain := request("api", desc("user=alice"), desc("tenant=t1"), desc("user=alice", "path=/api"))
	plain.HitsAddend = 3
	negative := request("api", desc("user=bob"))
	negative.Descriptors[0].IsNegativeHits = true
	override := request("api", desc("user=carol"))
	override.Descriptors[0].Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: 2}
	own := request("api", withHits(desc("user=dan"), 7), desc("key"))
	empty := request("api", &ratelimitv3.RateLimitDescriptor{}, desc("=v", "k="))
	b := marshal(plain)
	seeds := [][]byte{
		nil,
		b,
		marshal(negative),
		marshal(override),
		marshal(own),
		marshal(empty),
		marshal(&rlsv3.RateLimitRequest{Domain: "only"}),
		append(append([]byte{}, b...), b...),                                                                              // every field twice: the domain's last wins, descriptors add up
		protowire.AppendString(protowire.AppendTag(nil, requestDomain, protowire.BytesType), "\xff\xfe"),                  // not UTF-8
		protowire.AppendVarint(protowire.AppendTag(append([]byte{}, b...), requestDomain, protowire.VarintType), 1),       // the domain as a varint
		protowire.AppendVarint(protowire.AppendTag(append([]byte{}, b...), 99, protowire.VarintType), 1),                  // an unknown field
		protowire.AppendFixed32(protowire.AppendTag(append([]byte{}, b...), requestHitsAddend, protowire.Fixed32Type), 1), // hits_addend as fixed32
		protowire.AppendVarint(protowire.AppendTag(nil, requestHitsAddend, protowire.VarintType), 1<<40),                  // beyond uint32
		b[:len(b)-3], // truncated
	}
	return seeds
}

// decodeBoth decodes b with the codec and with protobuf alone.
func decodeBoth(b []byte) (viaCodec, viaProto *rlsv3.RateLimitRequest, codecErr, protoErr error) {
	viaCodec, viaProto = new(rlsv3.RateLimitRequest), new(rlsv3.RateLimitRequest)
	codecErr = newCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, viaCodec)
	protoErr = proto.Unmarshal(b, viaProto)
	return
}

// TestCodecAgrees: every request decodes through the codec as protobuf
// decodes it, or fails where protobuf fails.
func TestCodecAgrees(t *testing.T) {
	t.Parallel()
	for i, b := range codecSeeds(t) {
		got, want, gerr, werr := decodeBoth(b)
		if (gerr == nil) != (werr == nil) {
			t.Errorf("seed %d: codec error %v, protobuf's %v", i, gerr, werr)
			continue
		}
		if werr == nil && !proto.Equal(got, want) {
			t.Errorf("seed %d: codec decoded %v, protobuf %v", i, got, want)
		}
	}
	// A request split across buffers, as gRPC may hand it over.
	b := codecSeeds(t)[1]
	got := new(rlsv3.RateLimitRequest)
	if err := newCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b[:5]), mem.SliceBuffer(b[5:])}, got); err != nil {
		t.Fatal(err)
	}
	want := new(rlsv3.RateLimitRequest)
	if err := proto.Unmarshal(b, want); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("split: codec decoded %v, protobuf %v", got, want)
	}
	// Other messages are protobuf's.
	hits := new(wrapperspb.UInt64Value)
	if err := newCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{8, 42})}, hits); err != nil || hits.Value != 42 {
		t.Errorf("UInt64Value: %v, %v", hits, err)
	}
}

// FuzzCodec: whatever the bytes, the codec decodes them as protobuf does.
func FuzzCodec(f *testing.F) {
	for _, b := range codecSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want, gerr, werr := decodeBoth(b)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("codec error %v, protobuf's %v", gerr, werr)
		}
		if werr == nil && !proto.Equal(got, want) {
			t.Fatalf("codec decoded %v, protobuf %v", got, want)
		}
	})
}

// TestCodecAllocs: a request of three descriptors, as Envoy sends it,
// decodes in five allocations (one string, four slices), where protobuf
// makes one for each descriptor, entry and string.
func TestCodecAllocs(t *testing.T) {
	b := codecSeeds(t)[1]
	data := mem.BufferSlice{mem.SliceBuffer(b)}
	c := newCodec()
	var req rlsv3.RateLimitRequest
	got := testing.AllocsPerRun(100, func() {
		proto.Reset(&req)
		if err := c.Unmarshal(data, &req); err != nil {
			t.Fatal(err)
		}
	})
	if got > 5 {
		t.Errorf("a request of three descriptors took %v allocations, want at most 5", got)
	}
}
