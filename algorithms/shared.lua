-- shared.lua: the start of every script: what all its decisions share.
-- A decision is prelude.lua, an algorithm's file and conclude.lua, run as
-- the script's own code in a script of one decision and in a loop in
-- MultiScript (see scripts.go).
--
-- Redis runs a script's code afresh on every call: each local function it
-- defines is a new closure, made and later collected on every decision.
-- So decisions are straight-line code that fills in variables, and only
-- the helpers below are functions.

local NEVER = -1 -- retry-after of a cost above capacity (core.RetryNever)
local MAXEXACT = 9007199254740992 -- 2^53: every number of a state is an integer below

-- idiv returns floor(a / b) for 0 <= a < 2^53 and b >= 1. The double
-- a / b is off by at most (a / b) * 2^-53 < 1 / b, less than the distance
-- from a / b up to the next integer, so its floor is exact.
local function idiv(a, b)
	return math.floor(a / b)
end

-- ceildiv returns ceil(a / b), 0 for a <= 0 (core.CeilDiv).
local function ceildiv(a, b)
	if a <= 0 then
		return 0
	end
	return math.floor((a - 1) / b) + 1
end

-- refill returns level after elapsed µs at r units a µs, capped at
-- capacity. The product may pass 2^53, but only where the true sum is
-- beyond capacity (< 2^53), and rounding never takes it back below.
local function refill(level, capacity, elapsed, r)
	local v = level + elapsed * r
	if v >= capacity then
		return capacity
	end
	return v
end

-- clock is the server's clock in µs, read once a script, so that every
-- decision of a script has the same instant.
local clock
