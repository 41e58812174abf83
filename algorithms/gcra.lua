-- gcra.lua: the Lua twin of gcra.go, run after prelude.lua (which gives
-- the calling convention: KEYS[1] the state, ARGV[1] the packed request, a
-- reply of six integers).
--
-- State: T the last charge (µs); A the TAT's whole microseconds; B its
-- fraction in ticks of 1/C µs; C the units per µs it was written under; E
-- the TAT rounded up. Arithmetic is in ticks: a token is u ticks, the
-- tolerance burst × u.

local tolerance = burst * u
-- owed: how far the TAT was ahead of the last charge, capped at the
-- tolerance when it was taken.
local owed = 0
if now < E then
	local ahead = A - T
	if C == r then
		owed = math.min(ahead * r + B, tolerance)
	else
		if B > 0 then
			ahead = ahead + 1
		end
		owed = math.min(math.min(ahead, ceildiv(tolerance, r)) * r, tolerance)
	end
end
-- debt: how far the TAT is ahead of now.
local debt = tolerance - refill(tolerance - owed, tolerance, now - T, r)
local function keep(debt)
	local whole = idiv(debt, r)
	save(now, now + whole, debt - whole * r, r, now + ceildiv(debt, r))
end
if refund then
	if cost > 0 and debt > 0 then
		if cost >= ceildiv(debt, u) then
			debt = 0
		else
			debt = debt - cost * u
		end
		keep(debt)
	end
	return reply(true, burst, idiv(tolerance - debt, u), 0, ceildiv(debt, r))
end
if cost > burst then
	return hold(false, burst, idiv(tolerance - debt, u), NEVER, ceildiv(debt, r))
end
local over = debt + cost * u - tolerance
if over > 0 then
	return hold(false, burst, idiv(tolerance - debt, u), ceildiv(over, r), ceildiv(debt, r))
end
debt = debt + cost * u
if cost == 0 then
	return hold(true, burst, idiv(tolerance - debt, u), 0, ceildiv(debt, r))
end
if not peek then
	keep(debt)
end
return reply(true, burst, idiv(tolerance - debt, u), 0, ceildiv(debt, r))
