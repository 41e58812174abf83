-- gcra.lua: the Lua twin of gcra.go, run between prelude.lua (which gives
-- the calling convention: KEY the state, ARG the packed request) and
-- conclude.lua (which makes the reply and the write).
--
-- State: T (Last) the last charge (µs); A (Vals[gcraTAT]) the TAT's whole
-- microseconds; B (Vals[gcraTicks]) its fraction in ticks of 1/|C| µs; C
-- (Vals[gcraPerMicro]) the units per µs it was written under, negated when
-- the key was in debt at T (a reservation took the TAT beyond the
-- tolerance); E (Expires) the TAT rounded up. Arithmetic is in ticks: a
-- token is u ticks, the tolerance burst × u.

local tolerance = burst * u
-- owed: how far the TAT was ahead of the last charge, capped at the
-- tolerance when it was taken unless the key was in debt then, when it is
-- kept up to 2^52 ticks (gcra.go).
local owed = 0
if now < E then
	local ahead = A - T
	if C == r then
		owed = min(ahead * r + B, tolerance)
	elseif C == -r then
		owed = ahead * r + B
	else
		if B > 0 then
			ahead = ahead + 1
		end
		local most = tolerance
		if C < 0 then
			most = 4503599627370496
		end
		owed = min(min(ahead, ceil(most / r)) * r, most)
	end
end
-- debt: how far the TAT is ahead of now; beyond the tolerance, a
-- reservation's debt. The time since the last charge, in ticks, may pass
-- 2^53, but only where it is beyond owed (< 2^53), and rounding never
-- takes it back below: the debt is paid.
local debt = owed - (now - T) * r
if debt < 0 then
	debt = 0
end
if refund then
	allowed = true
	if cost > 0 and debt > 0 then
		if cost >= ceil(debt / u) then
			debt = 0
		else
			debt = debt - cost * u
		end
		dirty = true
	end
elseif cost > burst then
	retry, forget = NEVER, true
elseif cost > 0 and debt + cost * u - tolerance > maxdebt then
	retry, forget = ceil((debt + cost * u - tolerance) / r), true
else
	debt = debt + cost * u
	allowed = true
	if cost == 0 then
		forget = true
	else
		dirty = not peek
		if debt > tolerance then
			delay = ceil((debt - tolerance) / r)
		end
	end
end
-- (debt >= 0: a refund pays it off at most.)
limit, reset = burst, ceil(debt / r)
if debt < tolerance then
	remaining = floor((tolerance - debt) / u)
end
units, per = tolerance - debt, u
if dirty then
	local whole = floor(debt / r)
	local c = r
	if debt > tolerance then
		c = -r
	end
	T, A, B, C, E = now, now + whole, debt - whole * r, c, now + reset
end
