package storefault_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/storefault"
)

// A Redis store's fault test starts a server of its own, as SCRIPT FLUSH
// reaches every client, and hands the helper a store on it.
func ExampleFlushUnderLoad() {
	var t *testing.T     // the test's *testing.T
	var store core.Store // a store on srv, made with the store's own client
	srv := redistest.Start(t)
	_ = srv.Addr() // where the store's client connects
	t.Log(storefault.FlushUnderLoad(t, srv, store))
}

// Each store runs the common cases, and says where its errors say more.
func ExampleMalformedCases() {
	var t *testing.T     // the test's *testing.T
	var store core.Store // the store under test
	says := map[string]string{"two-integers": "2 elements"}
	for i, c := range storefault.MalformedCases(says) {
		t.Run(c.Name, func(t *testing.T) {
			storefault.CheckMalformed(t, store, fmt.Sprintf("bad-%d", i), c)
		})
	}
}

func ExampleInfoCount() {
	info := "# Commandstats\r\ncmdstat_eval:calls=49,usec=1210,usec_per_call=24.69\r\ncmdstat_evalsha:calls=38611,usec=803201,usec_per_call=20.80\r\n"
	fmt.Println(storefault.InfoCount(info, "cmdstat_eval", "calls"))
	fmt.Println(storefault.InfoCount(info, "cmdstat_evalsha", "calls"))
	fmt.Println(storefault.InfoCount(info, "cmdstat_get", "calls"))
	// Output:
	// 49
	// 38611
	// 0
}

func ExampleDescribeTimeout() {
	fmt.Println(storefault.DescribeTimeout(fmt.Errorf("redisstore: eval: %w", context.DeadlineExceeded)))
	fmt.Println(storefault.DescribeTimeout(fmt.Errorf("redisstore: eval: %w", os.ErrDeadlineExceeded)))
	fmt.Println(storefault.DescribeTimeout(errors.New("connection refused")))
	// Output:
	// wraps context.DeadlineExceeded
	// a timeout, *poll.DeadlineExceededError with Timeout() true, not wrapping context.DeadlineExceeded
	// neither context.DeadlineExceeded nor a timeout
}
