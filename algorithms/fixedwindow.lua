-- fixedwindow.lua: the Lua twin of fixedwindow.go, run after prelude.lua
-- (which gives the calling convention: KEYS[1] the state, ARGV[1] the
-- packed request, a reply of six integers).
--
-- State: T the last charge (µs); A the start of the counted window; B the
-- count charged in it; E the window's end. Windows are aligned to the Unix
-- epoch, so Go and Lua agree on every boundary.

local start = idiv(now, period) * period
local count = 0
if now < E and A == start then
	count = B
end
local untilEnd = start + period - now
local function resetAfter(count)
	if count == 0 then
		return 0
	end
	return untilEnd
end
if refund then
	if cost > 0 and count > 0 then
		count = math.max(count - cost, 0)
		save(now, start, count, C, start + period)
	end
	return reply(true, rate, math.max(rate - count, 0), 0, resetAfter(count))
end
if cost > rate then
	return hold(false, rate, math.max(rate - count, 0), NEVER, resetAfter(count))
end
if cost > 0 and count + cost > rate then
	return hold(false, rate, math.max(rate - count, 0), untilEnd, untilEnd)
end
count = count + cost
if cost == 0 then
	return hold(true, rate, math.max(rate - count, 0), 0, resetAfter(count))
end
if not peek then
	save(now, start, count, C, start + period)
end
return reply(true, rate, math.max(rate - count, 0), 0, resetAfter(count))
