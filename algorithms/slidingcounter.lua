-- slidingcounter.lua: the Lua twin of slidingcounter.go, run after
-- prelude.lua (which gives the calling convention: KEYS[1] the state,
-- ARGV[1] the packed request, a reply of six integers).
--
-- State: T the last charge (µs); A the start of the current window; B its
-- count; C the previous window's count; E the end of the window after the
-- current one. Rate × period (µs) is within 2^52, so every product below
-- is exact.

local start = idiv(now, period) * period
local cur, prev = 0, 0
if now < E then
	if A == start then
		cur, prev = B, C
	elseif A == start - period then
		prev = B
	end
end
cur, prev = math.min(cur, rate), math.min(prev, rate)
local elapsed = now - start
local left = period - elapsed -- of the previous window, still covered
local function remaining(cur)
	return math.max(rate - cur - ceildiv(prev * left, period), 0)
end
local function resetAfter(cur)
	if cur > 0 then
		return 2 * period - elapsed
	elseif prev > 0 then
		return left
	end
	return 0
end
-- retry: the µs from now until a denied request of cost passes (retry in
-- slidingcounter.go).
local function retry()
	local room = rate - cur - cost
	if room >= 0 and prev > 0 then
		local e = period - idiv(room * period, prev)
		if e < period then
			return e - elapsed
		end
	end
	local e = 0
	if cur > 0 then
		e = math.max(period - idiv((rate - cost) * period, cur), 0)
	end
	return period + e - elapsed
end
if refund then
	if cost > 0 and cur > 0 then
		cur = math.max(cur - cost, 0)
		save(now, start, cur, prev, start + 2 * period)
	elseif cost > 0 and prev > 0 and A == start - period then
		-- The last charge was in the previous window, which still weighs
		-- until this one ends.
		prev = math.max(prev - cost, 0)
		save(now, start, 0, prev, start + period)
	end
	return reply(true, rate, remaining(cur), 0, resetAfter(cur))
end
if cost > rate then
	return hold(false, rate, remaining(cur), NEVER, resetAfter(cur))
end
local room = rate - cur - cost
if cost > 0 and (room < 0 or prev * left > room * period) then
	return hold(false, rate, remaining(cur), retry(), resetAfter(cur))
end
cur = cur + cost
if cost == 0 then
	return hold(true, rate, remaining(cur), 0, resetAfter(cur))
end
if not peek then
	save(now, start, cur, prev, start + 2 * period)
end
return reply(true, rate, remaining(cur), 0, resetAfter(cur))
