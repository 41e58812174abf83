package serve

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
)

// harness is a Server on free ports over a store, with a client.
type harness struct {
	srv    *Server
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	path   string // the configuration file
	stop   func() // stops the server and waits for Serve to return
}

// start serves the configuration text on store (a new memstore if nil).
func start(t *testing.T, config string, store core.Store, change ...func(*Config)) *harness {
	t.Helper()
	if store == nil {
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mem.Close() })
		store = mem
	}
	path := filepath.Join(t.TempDir(), "limits.yaml")
	writeConfig(t, path, config)
	cfg := Config{Store: store, Limits: path, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Reload: -1, Grace: time.Second}
	for _, f := range change {
		f(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{srv: srv, client: rlsv3.NewRateLimitServiceClient(conn), conn: conn, path: path}
	stopped := false
	h.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		conn.Close()
	}
	t.Cleanup(h.stop)
	return h
}

// writeConfig replaces the file at path, atomically, as a deployment
// would (write a new file, rename it over the old).
func writeConfig(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(strings.TrimLeft(text, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// desc is a descriptor of "key=value" entries ("key" alone: empty value).
func desc(entries ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// withHits gives d its own hits_addend.
func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func request(domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// ask sends req and fails the test on an error.
func (h *harness) ask(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := h.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// outcome is a response's overall code and each status's code and
// remaining, as "OK|OK:9,OVER_LIMIT:0".
func outcome(r *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.OverallCode.String())
	b.WriteByte('|')
	for i, st := range r.Statuses {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(st.Code.String())
		switch {
		case st.LimitRemaining == math.MaxUint32:
			b.WriteString(":max")
		case st.CurrentLimit != nil || st.LimitRemaining != 0:
			b.WriteString(":" + strconv.FormatUint(uint64(st.LimitRemaining), 10))
		}
	}
	return b.String()
}
