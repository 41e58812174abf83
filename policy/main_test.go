package policy

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/redistest"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the outage tests make thousands.
	redis.SetLogger(quiet{})
	redistest.Main(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
