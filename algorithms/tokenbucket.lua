-- tokenbucket.lua: the Lua twin of tokenbucket.go, run between prelude.lua
-- (which gives the calling convention: KEY the state, ARG the packed
-- request) and conclude.lua (which makes the reply and the write).
--
-- State: T the last charge (µs); A the level in units at T, below zero
-- while reservations are owed (never below -2^52); B the units per token
-- the level was written under; E when the bucket is full again.

local capacity = burst * u
-- A key owes at most 2^52 - capacity, also when the limit changed since it
-- went into debt (tokenbucket.go).
local floor = capacity - 4503599627370496
local level = capacity
if now < E then
	level = A
	if B ~= u and B > 0 then
		level = math.min(math.max(idiv(A, B), -idiv(-floor, u)), burst) * u
	end
	level = refill(math.max(level, floor), capacity, now - T, r)
end
if refund then
	allowed = true
	if cost > 0 and level < capacity then
		if cost >= ceildiv(capacity - level, u) then
			level = capacity
		else
			level = level + cost * u
		end
		dirty = true
	end
elseif cost > burst then
	retry, forget = NEVER, true
elseif cost > 0 and cost * u - level > maxdebt then
	retry, forget = ceildiv(cost * u - level, r), true
elseif cost == 0 then
	allowed, forget = true, true
else
	level = level - cost * u
	allowed, delay, dirty = true, ceildiv(-level, r), not peek
end
limit, remaining, reset = burst, idiv(math.max(level, 0), u), ceildiv(capacity - level, r)
units, per = level, u
if dirty then
	T, A, B, E = now, level, u, now + reset
end
