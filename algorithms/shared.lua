-- shared.lua: the start of every script: what all decisions share. Each
-- decision (prelude.lua and an algorithm's file, as a function) queues its
-- write in writes; the driver runs them with flush, for a script of
-- several decisions only if every one was admitted (see scripts.go).

local NEVER = -1 -- retry-after of a cost above capacity (core.RetryNever)

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
	return idiv(a - 1, b) + 1
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

-- The server's clock, one for the whole fleet and one for every decision
-- of a script. TIME in a script is safe since Redis 5: scripts replicate
-- their effects, not themselves.
local clock
local function servertime()
	if not clock then
		local t = redis.call('TIME')
		clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
	end
	return clock
end

-- writes holds the script's pending writes, {key, ttl ms, value}, in order.
local writes = {}
local function flush()
	for _, w in ipairs(writes) do
		redis.call('PSETEX', w[1], w[2], w[3])
	end
end

