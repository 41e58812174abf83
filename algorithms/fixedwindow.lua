-- fixedwindow.lua: the Lua twin of fixedwindow.go, run between prelude.lua
-- (which gives the calling convention: KEY the state, ARG the packed
-- request) and conclude.lua (which makes the reply and the write).
--
-- State: T (Last) the last charge (µs); A (Vals[fwStart]) the start of the
-- counted window; B (Vals[fwCount]) the count charged in it; E (Expires)
-- the window's end. Windows are aligned to the Unix epoch, so Go and Lua
-- agree on every boundary.

local start = floor(now / period) * period
local count = 0
if now < E and A == start then
	count = B
end
local untilEnd = start + period - now
if refund then
	allowed = true
	if cost > 0 and count > 0 then
		count = max(count - cost, 0)
		dirty = true
	end
elseif cost > rate then
	retry, forget = NEVER, true
elseif cost > 0 and count + cost > rate then
	retry, forget = untilEnd, true
else
	count = count + cost
	allowed = true
	if cost == 0 then
		forget = true
	else
		dirty = not peek
	end
end
limit, remaining = rate, max(rate - count, 0)
units, per = rate - count, 1
-- The window's end, once anything is counted in it (as it is when a cost
-- that fits the limit is denied).
if count > 0 then
	reset = untilEnd
end
if dirty then
	T, A, B, E = now, start, count, start + period
end
