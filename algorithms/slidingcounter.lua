-- slidingcounter.lua: the Lua twin of slidingcounter.go, run between
-- prelude.lua (which gives the calling convention: KEY the state, ARG the
-- packed request) and conclude.lua (which makes the reply and the write).
--
-- State: T (Last) the last charge (µs); A (Vals[swcStart]) the start of
-- the current window; B (Vals[swcCount]) its count; C (Vals[swcPrev]) the
-- previous window's count; E (Expires) the end of the window after the
-- current one. Rate × period (µs) is within 2^52, so every product below
-- is exact.

local start = floor(now / period) * period
local cur, prev = 0, 0
if now < E then
	if A == start then
		cur, prev = B, C
	elseif A == start - period then
		prev = B
	end
end
cur, prev = min(cur, rate), min(prev, rate)
local elapsed = now - start
local left = period - elapsed -- of the previous window, still covered
local room = rate - cur - cost
if refund then
	allowed = true
	if cost > 0 and cur > 0 then
		cur = max(cur - cost, 0)
		T, A, B, C, E, dirty = now, start, cur, prev, start + 2 * period, true
	elseif cost > 0 and prev > 0 and A == start - period then
		-- The last charge was in the previous window, which still weighs
		-- until this one ends.
		prev = max(prev - cost, 0)
		T, A, B, C, E, dirty = now, start, 0, prev, start + period, true
	end
elseif cost > rate then
	retry, forget = NEVER, true
elseif cost > 0 and (room < 0 or prev * left > room * period) then
	-- The µs from now until the request passes (retry in
	-- slidingcounter.go).
	local e = period
	if room >= 0 and prev > 0 then
		e = period - floor(room * period / prev)
	end
	if e >= period then
		e = 0
		if cur > 0 then
			e = max(period - floor((rate - cost) * period / cur), 0)
		end
		e = period + e
	end
	retry, forget = e - elapsed, true
else
	cur = cur + cost
	allowed = true
	if cost == 0 then
		forget = true
	elseif not peek then
		T, A, B, C, E, dirty = now, start, cur, prev, start + 2 * period, true
	end
end
-- (prev × left >= 0, so its ceil is core.CeilDiv.)
limit, remaining = rate, max(rate - cur - ceil(prev * left / period), 0)
-- The level, exactly, in periods of a token: within 2^52 in magnitude.
units, per = (rate - cur) * period - prev * left, period
if cur > 0 then
	reset = 2 * period - elapsed
elseif prev > 0 then
	reset = left
end
