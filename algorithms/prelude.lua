-- prelude.lua: the start of every algorithm's decision. A script is
-- shared.lua, then, for each algorithm it runs, a function of (KEY, ARG)
-- made of this file followed by the algorithm's own (tokenbucket.lua,
-- ...), which ends by returning a reply; then the script's driver (see
-- scripts.go). The calling convention is core.Script's:
--
-- KEY      the key's state (KEYS[1] in a script of one decision): five
--          little-endian doubles T, A, B, C, E (core.State's fields),
--          then, for the sliding window log and the concurrency
--          algorithm, their entries as pairs of doubles.
-- ARG      the request (ARGV[1] in a script of one decision): ten
--          little-endian doubles: now (µs since the Unix epoch, or -1 for
--          the server's TIME), cost, op (0 charge, 1 peek, 2 refund),
--          rate, period (µs), burst, units per token, units per µs, the
--          debt in units a reservation may run to (0 if none), and the
--          lease of a concurrency lease (0 if none).
-- reply    {allowed (1/0), limit, remaining, retry-after µs (-1: never),
--          reset-after µs, delay µs}
--
-- Numbers: Redis's Lua has only doubles, exact for integers below 2^53.
-- Every quantity sluice keeps is below 2^52 (instants in µs up to 2112,
-- rates, costs, capacities), so the sums and products the Go twin takes in
-- int64 are exact here too, and so is the floor of a quotient (idiv).
-- States are packed as doubles, not written with tostring, which keeps
-- only 14 digits.

local now, cost, op, rate, period, burst, u, r, maxdebt, lease =
	struct.unpack('<dddddddddd', ARG)
-- A key's TTL is the time until it is forgotten plus this margin, in ms:
-- a second on the server's clock; a minute for a request at an instant of
-- its own, whose clock has nothing to do with the one Redis expires keys
-- by (a replay, a test), so that a pause between its requests does not
-- drop a key it still needs.
local margin = 1000
if now >= 0 then
	margin = 60000
end
if now < 0 then
	now = servertime()
end
local peek, refund = op == 1, op == 2

local state = redis.call('GET', KEY)
local T, A, B, C, E = 0, 0, 0, 0, 0
if state then
	T, A, B, C, E = struct.unpack('<ddddd', state)
end
-- Decide at max(now, T): a caller whose clock lags must not refill the
-- key from an instant before its last charge.
if now < T then
	now = T
end

local function reply(allowed, limit, remaining, retry, reset, delay)
	return {allowed and 1 or 0, limit, remaining, retry, reset, delay or 0}
end

-- hold is the reply to a decision that writes nothing: its waits are
-- capped at E, when the state is forgotten and the key starts afresh.
local function hold(allowed, limit, remaining, retry, reset)
	local left = E - now
	if left > 0 then
		if retry ~= NEVER and retry > left then
			retry = left
		end
		if reset > left then
			reset = left
		end
	end
	return reply(allowed, limit, remaining, retry, reset)
end

-- save writes the state with a TTL from now to e, the instant it is
-- forgotten, plus the margin. On the server's clock a store's expiry never
-- changes a decision: from e on every script decides as for a missing key.
-- The write waits in writes until the script's end (see shared.lua).
local function save(t, a, b, c, e, tail)
	local value = struct.pack('<ddddd', t, a, b, c, e)
	if tail then
		value = value .. tail
	end
	writes[#writes + 1] = {KEY, math.ceil((e - now) / 1000) + margin, value}
end

