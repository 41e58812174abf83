package redisengine

import (
	"testing"

	"github.com/sluicehq/sluice/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
