-- slidinglog.lua: the Lua twin of slidinglog.go, run between prelude.lua
-- (which gives the calling convention: KEY the state, ARG the packed
-- request) and conclude.lua (which makes the reply and the write).
--
-- State: T (Last) the last charge (µs); A (Vals[logCost]) the total cost
-- of the entries; E (Expires) when the newest entry leaves the window;
-- then the entries, oldest first, as pairs of doubles (at, cost), 16 bytes
-- each. Entries that have left the window are dropped whenever the state
-- is written, so the value holds at most rate entries and a decision reads
-- only those it needs: the ones that have left the window, and for a
-- denial the ones that must leave.

local n = 0
if state then
	n = (#state - HEAD) / 16
end
local function at(i) -- entries are numbered from 0
	return (unpackd('<d', state, HEAD + 16 * i + 1))
end
local function charged(i)
	return (unpackd('<d', state, HEAD + 16 * i + 9))
end
-- Check the oldest and newest entries, the ones every decision may read,
-- in O(1): an entry of sluice's is an instant and a positive cost, both
-- integers below 2^53, oldest first. A log that fails is healed (see
-- prelude.lua). Entries between them are read only as far as the window
-- has moved, and are not checked.
if n > 0 then
	local a, z, ca, cz = at(0), at(n - 1), charged(0), charged(n - 1)
	if not (a % 1 == 0 and z % 1 == 0 and ca % 1 == 0 and cz % 1 == 0 and a >= 0 and a <= z
		and z <= MAXEXACT and ca > 0 and ca <= MAXEXACT and cz > 0 and cz <= MAXEXACT) then
		state, n, healed, A, E = false, 0, true, 0, 0
	end
end

local first, live = 0, A
if now >= E then
	first, live = n, 0 -- forgotten
end
while first < n and at(first) <= now - period do
	live = live - charged(first)
	first = first + 1
end
-- newest: when the newest entry was charged, if this decision moves it.
local newest
allowed = true
if refund then
	if cost > 0 and live > 0 then
		-- Take the cost off the newest entries, newest first.
		local give, last, rest = cost, n - 1, nil
		while give > 0 and last >= first do
			local c = charged(last)
			if c > give then
				rest, live, give = c - give, live - give, 0
			else
				give, live, last = give - c, live - c, last - 1
			end
		end
		if live > 0 then
			tail = sub(state, HEAD + 16 * first + 1, HEAD + 16 * (last + 1))
			if rest then
				tail = sub(tail, 1, -17) .. packd('<dd', at(last), rest)
			end
			newest = at(last)
			T, A, B, E = now, live, 0, newest + period
		else
			T, A, B, E = now, 0, 0, now
		end
		dirty = true
	end
elseif cost > rate then
	allowed, retry, forget = false, NEVER, true
elseif cost > 0 and live + cost > rate then
	-- The request passes once enough of the oldest charges leave.
	local freed, i = 0, first
	while live - freed + cost > rate and i < n do
		freed = freed + charged(i)
		i = i + 1
	end
	allowed, retry, forget = false, at(i - 1) + period - now, true
elseif cost == 0 then
	forget = true
elseif peek then
	-- The charge would be the newest entry.
	live, newest = live + cost, now
else
	if n > first and at(n - 1) == now then
		tail = sub(state, HEAD + 16 * first + 1, -17) .. packd('<dd', now, charged(n - 1) + cost)
	elseif n > first then
		tail = sub(state, HEAD + 16 * first + 1) .. packd('<dd', now, cost)
	else
		tail = packd('<dd', now, cost)
	end
	live, newest = live + cost, now
	T, A, B, E, dirty = now, live, 0, now + period, true
end
limit, remaining = rate, max(rate - live, 0)
units, per = rate - live, 1
-- Everything charged has left the window a period after the newest entry.
if live ~= 0 then
	reset = (newest or at(n - 1)) + period - now
end
