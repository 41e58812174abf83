package redisfaults_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
)

// A Redis store's fault test starts a server of its own, as SCRIPT FLUSH
// reaches every client, and hands the helper a store on it.
func ExampleFlushUnderLoad() {
	var t *testing.T     // the test's *testing.T
	var store core.Store // a store on srv, made with the store's own client
	srv := redistest.Start(t)
	_ = srv.Addr() // where the store's client connects
	t.Log(redisfaults.FlushUnderLoad(t, srv, store))
}

// Each store runs the common cases, and says where its errors say more.
func ExampleMalformedCases() {
	var t *testing.T     // the test's *testing.T
	var store core.Store // the store under test
	says := map[string]string{"two-numbers": "16 bytes"}
	for i, c := range redisfaults.MalformedCases(says) {
		t.Run(c.Name, func(t *testing.T) {
			redisfaults.CheckMalformed(t, store, fmt.Sprintf("bad-%d", i), c)
		})
	}
}

func ExampleInfoCount() {
	info := "# Commandstats\r\ncmdstat_eval:calls=49,usec=1210,usec_per_call=24.69\r\ncmdstat_evalsha:calls=38611,usec=803201,usec_per_call=20.80\r\n"
	fmt.Println(redisfaults.InfoCount(info, "cmdstat_eval", "calls"))
	fmt.Println(redisfaults.InfoCount(info, "cmdstat_evalsha", "calls"))
	fmt.Println(redisfaults.InfoCount(info, "cmdstat_get", "calls"))
	// Output:
	// 49
	// 38611
	// 0
}

func ExampleDescribeTimeout() {
	fmt.Println(redisfaults.DescribeTimeout(fmt.Errorf("redisstore: eval: %w", context.DeadlineExceeded)))
	fmt.Println(redisfaults.DescribeTimeout(fmt.Errorf("redisstore: eval: %w", os.ErrDeadlineExceeded)))
	fmt.Println(redisfaults.DescribeTimeout(errors.New("connection refused")))
	// Output:
	// wraps context.DeadlineExceeded
	// a timeout, *poll.DeadlineExceededError with Timeout() true, not wrapping context.DeadlineExceeded
	// neither context.DeadlineExceeded nor a timeout
}
