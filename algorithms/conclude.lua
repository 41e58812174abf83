-- conclude.lua: the end of every algorithm's decision, after prelude.lua
-- and the algorithm's own file. It leaves reply, the decision's ten
-- numbers packed, and, if the decision writes, the key's new value and
-- either its TTL in ms or keep, to keep the key's TTL; the script writes
-- them, or deletes a healed key that the decision does not write (see
-- scripts.go), so that no unreadable value outlives the call.

-- A decision that writes nothing has its waits capped at E, when the state
-- is forgotten and the key starts afresh (forget in algorithms.go).
if forget then
	local left = E - now
	if left > 0 then
		if retry ~= NEVER and retry > left then
			retry = left
		end
		if reset > left then
			reset = left
		end
	end
end
-- The reply's first number holds flags: 1 allowed, 2 healed (the key held
-- a value sluice could not read; the decision is a missing key's). Then
-- the decision's numbers, its instant (now: the request's or the
-- server's, or the key's last charge if later), the level, and what a
-- partial admission admitted.
local admitted = 0
if take and allowed then
	admitted = take
end
-- The ten numbers are packed as little-endian doubles, all integers below
-- 2^53 and so exact: one string costs Redis and the client less than an
-- array of ten integers.
local reply = packd('<dddddddddd', (allowed and 1 or 0) + (healed and 2 or 0), limit, remaining, retry, reset, delay, now, units, per, admitted)
-- A written state's TTL runs from now to E, when it is forgotten, plus the
-- margin. On the server's clock a store's expiry never changes a
-- decision: from E on every script decides as for a missing key.
--
-- Setting a TTL costs Redis twice a plain SET, so a key on the server's
-- clock keeps its TTL (keep: SET ... KEEPTTL) while it already covers the
-- new state, and the state holds, in X, a time in µs on the server's
-- clock before which the key cannot expire. The key is kept while X is
-- from E + margin to E + margin + SLACK; otherwise it is given a TTL anew,
-- with SLACK added if the key had an X (it is in use, and will be
-- written again), so that a key written many times a second gets a TTL
-- about once per SLACK of its life. So a key lives at least until its
-- state is forgotten plus the margin, and at most SLACK beyond. X is
-- the TTL from the start of the script's clock's millisecond, less one,
-- at or before the instant Redis counts it from. A state written at an
-- instant of the request's own gets a TTL on each write, and X 0.
local value, ttl
local keep = false
if dirty then
	local least = E + margin * 1000
	if not ontime then
		ttl, X = ceil((E - now) / 1000) + margin, 0
	elseif X >= least and X <= least + SLACK * 1000 then
		keep = true
	else
		ttl = ceil((E - now) / 1000) + margin
		if X > 0 then
			ttl = ttl + SLACK
		end
		X = (floor(clock / 1000) - 1 + ttl) * 1000
	end
	value = packd('<dddddd', T, A, B, C, E, X)
	if tail then
		value = value .. tail
	end
end
