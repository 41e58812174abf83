-- tokenbucket.lua: the Lua twin of tokenbucket.go, run after prelude.lua
-- (which gives the calling convention: KEYS[1] the state, ARGV[1] the
-- packed request, a reply of five integers).
--
-- State: T the last charge (µs); A the level in units at T; B the units
-- per token the level was written under; E when the bucket is full again.

local capacity = burst * u
local level = capacity
if now < E then
	level = A
	if B ~= u and B > 0 then
		level = math.min(idiv(A, B), burst) * u
	end
	level = refill(level, capacity, now - T, r)
end
if cost > burst then
	return hold(false, burst, idiv(level, u), NEVER, ceildiv(capacity - level, r))
end
local need = cost * u
if level < need then
	return hold(false, burst, idiv(level, u), ceildiv(need - level, r), ceildiv(capacity - level, r))
end
level = level - need
local full = ceildiv(capacity - level, r)
if cost == 0 then
	return hold(true, burst, idiv(level, u), 0, full)
end
if not peek then
	save(now, level, u, C, now + full)
end
return reply(true, burst, idiv(level, u), 0, full)
