package loadgen

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestReplyDecodesAsProtobuf decodes responses one after another into one
// reply, as a worker does, and checks each against protobuf's decoding:
// fewer statuses after more, a status without a limit or a reset after
// one with, and fields the reply leaves to protobuf.
func TestReplyDecodesAsProtobuf(t *testing.T) {
	full := func(code rlsv3.RateLimitResponse_Code, name string, secs int64, nanos int32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               code,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: 1000000, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
			LimitRemaining:     4294967295,
			DurationUntilReset: &durationpb.Duration{Seconds: secs, Nanos: nanos},
		}
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	resps := []*rlsv3.RateLimitResponse{
		{OverallCode: ok, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{full(ok, "", 59, 0), full(ok, "tenant", 1, 500), full(ok, "", 0, 0)}},
		{OverallCode: over, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{full(over, "", 12, -1)}},
		{OverallCode: ok, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: ok}, {Code: ok, LimitRemaining: 7}}},
		{},
		{OverallCode: over, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{full(over, "é", -3, 0)},
			ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "RateLimit-Limit", Value: "5"}}},
		{OverallCode: ok, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{full(ok, "", 1, 0), full(ok, "", 2, 0), full(ok, "", 3, 0), full(ok, "", 4, 0)}},
		{OverallCode: ok, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{full(ok, "x", 5, 0)}},
	}
	r := new(reply)
	for i, want := range resps {
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.unmarshal(b); err != nil {
			t.Fatalf("response %d: unmarshal: %v", i, err)
		}
		if !proto.Equal(&r.msg, want) {
			t.Errorf("response %d: decoded %v, want %v", i, &r.msg, want)
		}
	}
}

// TestReplyRefusesWhatDoesNotParse checks that bytes protobuf refuses are
// refused, not decoded in part.
func TestReplyRefusesWhatDoesNotParse(t *testing.T) {
	b, err := proto.Marshal(&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	r := new(reply)
	if err := r.unmarshal(b[:len(b)-1]); err == nil {
		t.Errorf("unmarshal of a truncated response = nil error, want protobuf's")
	}
}

// TestCodecEncodesOnce checks that a prebuilt workload's requests are
// encoded before the run and sent as encoded, without allocating, and
// that every request's bytes, prebuilt or not, are protobuf's after
// gRPC's prefix.
func TestCodecEncodesOnce(t *testing.T) {
	w, err := Keyed("bench", "x-", 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	other, err := Keyed("other", "y-", 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := newCodec()
	if err := c.encode(w.reqs); err != nil {
		t.Fatal(err)
	}
	for _, req := range []*rlsv3.RateLimitRequest{w.Request(0), w.Request(1), other.Request(0)} {
		b, err := c.message(req)
		pb, _ := proto.Marshal(req)
		want := append([]byte{0, 0, 0, 0, byte(len(pb))}, pb...)
		if err != nil || len(pb) > 255 || string(b) != string(want) {
			t.Errorf("message(%v) = %x, %v; want %x", req, b, err, want)
		}
	}
	req := w.Request(1)
	first, _ := c.message(req)
	again, _ := c.message(req)
	if &first[0] != &again[0] {
		t.Errorf("message encoded a prebuilt request again")
	}
	if n := testing.AllocsPerRun(100, func() { c.message(req) }); n != 0 {
		t.Errorf("message of a prebuilt request allocates %v times, want 0", n)
	}
}
