-- tokenbucket.lua: the Lua twin of tokenbucket.go, run after prelude.lua
-- (which gives the calling convention: KEYS[1] the state, ARGV[1] the
-- packed request, a reply of six integers).
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
local function remaining(level)
	return idiv(math.max(level, 0), u)
end
if refund then
	if cost > 0 and level < capacity then
		if cost >= ceildiv(capacity - level, u) then
			level = capacity
		else
			level = level + cost * u
		end
		save(now, level, u, C, now + ceildiv(capacity - level, r))
	end
	return reply(true, burst, remaining(level), 0, ceildiv(capacity - level, r))
end
if cost > burst then
	return hold(false, burst, remaining(level), NEVER, ceildiv(capacity - level, r))
end
local need = cost * u
local short = need - level
if cost > 0 and short > maxdebt then
	return hold(false, burst, remaining(level), ceildiv(short, r), ceildiv(capacity - level, r))
end
if cost == 0 then
	return hold(true, burst, remaining(level), 0, ceildiv(capacity - level, r))
end
level = level - need
local full = ceildiv(capacity - level, r)
if not peek then
	save(now, level, u, C, now + full)
end
return reply(true, burst, remaining(level), 0, full, ceildiv(-level, r))
