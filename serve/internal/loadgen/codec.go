package loadgen

import (
	"encoding/binary"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// codec encodes the requests of one [Run] as gRPC messages (protobuf,
// after gRPC's 5-byte prefix). A request of a prebuilt workload is
// encoded once, before the run, and its bytes sent again each time it is
// sent, since a workload sends the same requests over and over.
// (Encoding other requests on first use, kept in a map, saved nothing
// measurable: a run's fresh users are each sent a few times at most.)
// Encoding is a cost of the load generator's that it shares with every
// server it drives, on the same cores: doing it once leaves more of the
// machine to the server measured, whichever it is.
type codec struct {
	// prebuilt holds the requests encoded before the run; written only
	// before the first call, it is read without a lock.
	prebuilt map[*rlsv3.RateLimitRequest][]byte
}

// newCodec returns a codec with nothing encoded yet.
func newCodec() *codec {
	return &codec{prebuilt: map[*rlsv3.RateLimitRequest][]byte{}}
}

// message returns req as a gRPC message: as encoded before the run if it
// was prebuilt, else encoded now. The bytes must not be modified.
func (c *codec) message(req *rlsv3.RateLimitRequest) ([]byte, error) {
	if b, ok := c.prebuilt[req]; ok {
		return b, nil
	}
	return marshal(req)
}

// encode encodes reqs before the run's first call.
func (c *codec) encode(reqs []*rlsv3.RateLimitRequest) error {
	for _, req := range reqs {
		b, err := marshal(req)
		if err != nil {
			return err
		}
		c.prebuilt[req] = b
	}
	return nil
}

// marshal encodes req as a gRPC message: a 0 (not compressed), the
// protobuf encoding's length in 4 bytes, big-endian, and the encoding.
func marshal(req *rlsv3.RateLimitRequest) ([]byte, error) {
	b := make([]byte, 5, 5+proto.Size(req))
	b, err := proto.MarshalOptions{}.MarshalAppend(b, req)
	if err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	return b, nil
}

// reply is a worker's response, decoded into the same messages from one
// RPC to the next: a response of Envoy's RLS shape (an overall code, and
// for each descriptor a code, a current limit, the limit remaining and
// the duration until reset) takes no allocation once the worker has seen
// as many statuses. Anything else is decoded by protobuf into msg.
type reply struct {
	msg rlsv3.RateLimitResponse
	sts []*replyStatus // each status and its messages, made once
}

// replyStatus is one descriptor's status in a [reply] and the messages it
// points to.
type replyStatus struct {
	st  rlsv3.RateLimitResponse_DescriptorStatus
	cur rlsv3.RateLimitResponse_RateLimit
	dur durationpb.Duration
}

// The fields of the RLS API that reply.decode reads (rls.proto,
// duration.proto).
const (
	responseCode     protowire.Number = 1 // RateLimitResponse.overall_code, enum
	responseStatuses protowire.Number = 2 // RateLimitResponse.statuses, repeated DescriptorStatus
	statusCode       protowire.Number = 1 // DescriptorStatus.code, enum
	statusLimit      protowire.Number = 2 // DescriptorStatus.current_limit, RateLimit
	statusRemaining  protowire.Number = 3 // DescriptorStatus.limit_remaining, uint32
	statusReset      protowire.Number = 4 // DescriptorStatus.duration_until_reset, Duration
	limitPerUnit     protowire.Number = 1 // RateLimit.requests_per_unit, uint32
	limitUnit        protowire.Number = 2 // RateLimit.unit, enum
	limitName        protowire.Number = 3 // RateLimit.name, string
	durationSeconds  protowire.Number = 1 // Duration.seconds, int64
	durationNanos    protowire.Number = 2 // Duration.nanos, int32
)

// unmarshal decodes b into r: itself if b holds only the fields it
// reads, else with protobuf.
func (r *reply) unmarshal(b []byte) error {
	if r.decode(b) {
		return nil
	}
	r.msg = rlsv3.RateLimitResponse{}
	return proto.Unmarshal(b, &r.msg)
}

// decode decodes b into r and reports true, or reports false if b holds
// a field it does not read or does not parse.
func (r *reply) decode(b []byte) bool {
	r.msg = rlsv3.RateLimitResponse{Statuses: r.msg.Statuses[:0]}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) bool {
		switch {
		case num == responseCode && typ == protowire.VarintType:
			r.msg.OverallCode = rlsv3.RateLimitResponse_Code(int32(n))
			return true
		case num == responseStatuses && typ == protowire.BytesType:
			return r.status(v)
		}
		return false
	})
}

// status decodes b, a DescriptorStatus, as r's next status.
func (r *reply) status(b []byte) bool {
	i := len(r.msg.Statuses)
	if i == len(r.sts) {
		r.sts = append(r.sts, new(replyStatus))
	}
	s := r.sts[i]
	s.st = rlsv3.RateLimitResponse_DescriptorStatus{}
	r.msg.Statuses = append(r.msg.Statuses, &s.st)
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) bool {
		switch {
		case num == statusCode && typ == protowire.VarintType:
			s.st.Code = rlsv3.RateLimitResponse_Code(int32(n))
		case num == statusRemaining && typ == protowire.VarintType:
			s.st.LimitRemaining = uint32(n)
		case num == statusLimit && typ == protowire.BytesType:
			if s.st.CurrentLimit == nil {
				s.cur = rlsv3.RateLimitResponse_RateLimit{}
				s.st.CurrentLimit = &s.cur
			}
			return s.limit(v)
		case num == statusReset && typ == protowire.BytesType:
			if s.st.DurationUntilReset == nil {
				s.dur = durationpb.Duration{}
				s.st.DurationUntilReset = &s.dur
			}
			return s.duration(v)
		default:
			return false
		}
		return true
	})
}

// limit decodes b, a RateLimit, into s's current limit.
func (s *replyStatus) limit(b []byte) bool {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) bool {
		switch {
		case num == limitPerUnit && typ == protowire.VarintType:
			s.cur.RequestsPerUnit = uint32(n)
		case num == limitUnit && typ == protowire.VarintType:
			s.cur.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(int32(n))
		case num == limitName && typ == protowire.BytesType && utf8.Valid(v):
			s.cur.Name = string(v)
		default:
			return false
		}
		return true
	})
}

// duration decodes b, a Duration, into s's duration until reset.
func (s *replyStatus) duration(b []byte) bool {
	return fields(b, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) bool {
		switch {
		case num == durationSeconds && typ == protowire.VarintType:
			s.dur.Seconds = int64(n)
		case num == durationNanos && typ == protowire.VarintType:
			s.dur.Nanos = int32(n)
		default:
			return false
		}
		return true
	})
}

// fields calls f with each field of the message b: its number, its type,
// and its bytes (a length-delimited field's) or its value (a varint's).
// It stops and reports false when f does, or when b does not parse or
// holds a field of another type.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) bool) bool {
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return false
		}
		b = b[k:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.BytesType:
			v, k = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, k = protowire.ConsumeVarint(b)
		default:
			return false
		}
		if k < 0 || !f(num, typ, v, n) {
			return false
		}
		b = b[k:]
	}
	return true
}
