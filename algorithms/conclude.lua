-- conclude.lua: the end of every algorithm's decision, after prelude.lua
-- and the algorithm's own file. It leaves reply, the decision's ten
-- numbers packed, and, if the decision writes, the key's new value and its TTL
-- in ms; the script writes them, or deletes a healed key that the
-- decision does not write (see scripts.go), so that no unreadable value
-- outlives the call.

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
local reply = struct.pack('<dddddddddd', (allowed and 1 or 0) + (healed and 2 or 0), limit, remaining, retry, reset, delay, now, units, per, admitted)
-- A written state's TTL runs from now to E, when it is forgotten, plus the
-- margin. On the server's clock a store's expiry never changes a
-- decision: from E on every script decides as for a missing key.
local value, ttl
if dirty then
	value = struct.pack('<ddddd', T, A, B, C, E)
	if tail then
		value = value .. tail
	end
	ttl = ceil((E - now) / 1000) + margin
end
