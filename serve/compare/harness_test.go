package compare

import (
	"os"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/redistest"
)

// TestPeerHarness starts the peer, asks it once, and stops it.
func TestPeerHarness(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	p := StartPeer(t, PeerConfig{Redis: r.Addr(), Config: "domain: h\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: 1\n"})
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before, err := CommandStats(r)
	if err != nil {
		t.Fatal(err)
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "h", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}},
	}}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := client.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatalf("call %d: %v\n%s", i+1, err, p.LogTail())
		}
		if resp.GetOverallCode() != want {
			t.Errorf("call %d: overall_code %v, want %v", i+1, resp.GetOverallCode(), want)
		}
	}
	after, err := CommandStats(r)
	if err != nil {
		t.Fatal(err)
	}
	// Two decisions of one descriptor: INCRBY and EXPIRE each.
	if d := after.Sub(before); d["incrby"] != 2 || d["expire"] != 2 {
		t.Errorf("Redis executed %v for two decisions, want incrby 2 and expire 2", d)
	}
	if _, err := p.CPU(); err != nil {
		t.Error(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() {
		t.Errorf("pid %d still running after Stop", p.PID())
	}
}

func TestParseCommandStats(t *testing.T) {
	t.Parallel()
	info := "# Commandstats\r\ncmdstat_incrby:calls=12,usec=30,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|get:calls=3,usec=1,usec_per_call=0.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=9,usec=1,usec_per_call=0.11,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if got["incrby"] != 12 || got["config|get"] != 3 || len(got) != 3 {
		t.Errorf("parseCommandStats = %v, want incrby 12, config|get 3, info 9", got)
	}
	d := got.Sub(Commands{"incrby": 2})
	if d.Total() != 13 || d.PerDecision(10) != "incrby 1.00, config|get 0.30" {
		t.Errorf("Sub = %v (%q), want incrby 10 and config|get 3, no info", d, d.PerDecision(10))
	}
}

func TestProcessCPU(t *testing.T) {
	t.Parallel()
	// Burn some CPU so that the 10 ms ticks show it.
	x := 0
	for i := range 50_000_000 {
		x += i % 7
	}
	cpu, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if cpu <= 0 {
		t.Errorf("ProcessCPU(self) = %v after a busy loop (%d), want > 0", cpu, x)
	}
}
