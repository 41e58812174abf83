package algorithms

import (
	_ "embed" // the Lua twins

	"github.com/sluicehq/sluice/core"
)

// Each algorithm's Lua twin is prelude.lua followed by its own file; see
// [core.Script] for the calling convention they share.
var (
	//go:embed prelude.lua
	prelude string
	//go:embed tokenbucket.lua
	tokenBucketLua string
	//go:embed gcra.lua
	gcraLua string
	//go:embed fixedwindow.lua
	fixedWindowLua string
	//go:embed slidingcounter.lua
	slidingWindowCounterLua string
	//go:embed slidinglog.lua
	slidingWindowLogLua string
	//go:embed concurrency.lua
	concurrencyLua string

	tokenBucketScript          = core.NewScript(prelude + tokenBucketLua)
	gcraScript                 = core.NewScript(prelude + gcraLua)
	fixedWindowScript          = core.NewScript(prelude + fixedWindowLua)
	slidingWindowCounterScript = core.NewScript(prelude + slidingWindowCounterLua)
	slidingWindowLogScript     = core.NewScript(prelude + slidingWindowLogLua)
	concurrencyScript          = core.NewScript(prelude + concurrencyLua)
)

// Script returns the token bucket's Lua twin.
func (tokenBucket) Script() *core.Script { return tokenBucketScript }

// Script returns GCRA's Lua twin.
func (gcra) Script() *core.Script { return gcraScript }

// Script returns the fixed window's Lua twin.
func (fixedWindow) Script() *core.Script { return fixedWindowScript }

// Script returns the sliding window counter's Lua twin.
func (slidingWindowCounter) Script() *core.Script { return slidingWindowCounterScript }

// Script returns the sliding window log's Lua twin.
func (slidingWindowLog) Script() *core.Script { return slidingWindowLogScript }

// Script returns the concurrency algorithm's Lua twin.
func (concurrency) Script() *core.Script { return concurrencyScript }

var (
	_ core.Scripted = tokenBucket{}
	_ core.Scripted = gcra{}
	_ core.Scripted = fixedWindow{}
	_ core.Scripted = slidingWindowCounter{}
	_ core.Scripted = slidingWindowLog{}
	_ core.Scripted = concurrency{}
)
