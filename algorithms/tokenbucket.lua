-- tokenbucket.lua: the Lua twin of tokenbucket.go, run between prelude.lua
-- (which gives the calling convention: KEY the state, ARG the packed
-- request) and conclude.lua (which makes the reply and the write).
--
-- State: T (Last) the last charge (µs); A (Vals[tbLevel]) the level in
-- units at T, below zero while reservations are owed (never below -2^52);
-- B (Vals[tbPerToken]) the units per token the level was written under; E
-- (Expires) when the bucket is full again.

local capacity = burst * u
-- A key owes at most 2^52 - capacity, also when the limit changed since it
-- went into debt (tokenbucket.go).
-- (tokenbucket.go calls it floor; here floor is math.floor).
local lowest = capacity - 4503599627370496
local level = capacity
if now < E then
	level = A
	if B ~= u and B > 0 then
		level = min(max(floor(A / B), -floor(-lowest / u)), burst) * u
	end
	-- The refill may pass 2^53, but only where the true sum is beyond
	-- capacity (< 2^53), and rounding never takes it back below.
	level = max(level, lowest) + (now - T) * r
	if level > capacity then
		level = capacity
	end
end
if refund then
	allowed = true
	if cost > 0 and level < capacity then
		if cost >= ceil((capacity - level) / u) then
			level = capacity
		else
			level = level + cost * u
		end
		dirty = true
	end
elseif cost > burst then
	retry, forget = NEVER, true
elseif cost > 0 and cost * u - level > maxdebt then
	retry, forget = ceil((cost * u - level) / r), true
elseif cost == 0 then
	allowed, forget = true, true
else
	level = level - cost * u
	allowed, dirty = true, not peek
	if level < 0 then
		delay = ceil(-level / r)
	end
end
-- (level <= capacity: a refund fills the bucket at most.)
limit, reset = burst, ceil((capacity - level) / r)
if level > 0 then
	remaining = floor(level / u)
end
units, per = level, u
if dirty then
	T, A, B, E = now, level, u, now + reset
end
