-- shared.lua: the Lua twin of adaptive.SharedLimit's transition
-- (shared.go), which keeps a fleet's adapted limit. It is self-contained:
-- it shares nothing with the scripts of package algorithms, only their
-- calling convention (algorithms.Script):
--
-- KEYS[1]  the shared value: five little-endian doubles T (Last, the
--          instant of the last write, µs), A (Vals[sharedValue], the
--          value, thousandths of an event per period), B (Vals[sharedSeq],
--          its sequence number), C (0), E (Expires, when it is forgotten,
--          µs).
-- ARGV[1]  ten little-endian doubles, of which this script reads five:
--          now (µs since the Unix epoch, or -1 for the server's TIME),
--          cost (the proposal), op (0 propose, else read), rate (writes
--          per period) and period (µs, the value's TTL).
-- reply    ten little-endian doubles, packed (algorithms.Script):
--          allowed (1: written), value, sequence, retry-after µs,
--          reset-after µs, 0, the instant decided at (µs), 0, 0, 0; a
--          value of 0 means there is none. The shared value has no level
--          (its units per token, the ninth number, are 0).
--
-- Numbers: Redis's Lua has only doubles, exact for integers below 2^53;
-- every number here is an integer below 2^53, so the arithmetic is the Go
-- transition's. The value is packed as doubles, never written with
-- tostring, which keeps only 14 digits.

local KEY = KEYS[1]
local now, cost, op, rate, period = struct.unpack('<ddddd', ARGV[1])
-- The key's TTL is the value's remaining life plus this margin, in ms: a
-- second on the server's clock, a minute for a request at an instant of
-- its own (a replay, a test), whose clock is not the one Redis expires
-- keys by.
local margin = 60000
if now < 0 then
	-- TIME in a script is safe since Redis 5: scripts replicate their
	-- effects, not themselves.
	local t = redis.call('TIME')
	now = t[1] * 1000000 + t[2]
	margin = 1000
end

local MAXUNITS = 4503599627370496 -- 2^52
local MAXEXACT = 9007199254740992 -- 2^53

-- A value this script did not write (a key of another type, which GET
-- answers with an error; a string of another length; numbers that are
-- not finite integers in range) is no value: the next proposal replaces
-- it. NaN fails every comparison, and infinities fail the range checks.
-- (No helper function: Redis makes a script's functions afresh on every
-- call.)
local T, A, B, E = 0, 0, 0, 0
local raw = redis.pcall('GET', KEY)
if type(raw) == 'string' and #raw == 40 then
	local t, a, b, c, e = struct.unpack('<ddddd', raw)
	if t >= 0 and t <= e and e <= MAXEXACT and a >= 1 and a <= MAXUNITS
		and b >= 1 and b <= MAXUNITS and c == 0
		and math.floor(t) == t and math.floor(a) == a
		and math.floor(b) == b and math.floor(e) == e then
		T, A, B, E = t, a, b, e
	end
end

-- The value's clock never runs backwards.
if now < T then
	now = T
end
local live = E > now
-- rate divides period (SharedLimit's Validate), so the quotient is exact.
local interval = period / rate
local gap = interval - math.floor(interval / 4)

if op == 0 and cost > 0 and (not live or now - T >= gap) then
	local seq = 1
	if live and B < MAXUNITS then
		seq = B + 1
	end
	redis.call('PSETEX', KEY, math.ceil(period / 1000) + margin,
		struct.pack('<ddddd', now, cost, seq, 0, now + period))
	return struct.pack('<dddddddddd', 1, cost, seq, 0, period, 0, now, 0, 0, 0)
end
if live then
	local retry = T + gap - now
	if retry < 0 then
		retry = 0
	end
	return struct.pack('<dddddddddd', 0, A, B, retry, E - now, 0, now, 0, 0, 0)
end
return struct.pack('<dddddddddd', 0, 0, 0, 0, 0, 0, now, 0, 0, 0)
