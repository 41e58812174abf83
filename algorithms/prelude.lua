-- prelude.lua: the start of every algorithm's decision. A decision is
-- this file, then the algorithm's own (tokenbucket.lua, ...), then
-- conclude.lua, run with KEY, ARG and AT set (see shared.lua and
-- scripts.go).
-- The calling convention is core.Script's:
--
-- ENTRIES  whether the algorithm's states hold entries after the six
--          numbers (the sliding window log's and concurrency's do).
-- KEY      the key's state (KEYS[1] in a script of one decision): six
--          little-endian doubles T, A, B, C, E (core.State's Last,
--          Vals[0], Vals[1], Vals[2] and Expires) and X (the key's
--          expiry, see conclude.lua), then, for the sliding window log and
--          the concurrency algorithm, their entries as pairs of doubles.
-- ARG, AT  the request: the ten doubles of ARG from its byte AT (ARGV[1]
--          and 1 in a script of one decision; MultiScript reads each of
--          its requests where it lies in its ARGV[1], making no string of
--          it), little-endian: now (µs since the Unix epoch, or -1 for
--          the server's TIME), cost, op (0 charge, 1 peek, 2 refund, 3
--          admit at most cost), rate, period (µs), burst, units per
--          token, units per µs, the debt in units a reservation may run
--          to (0 if none), and the lease of a concurrency lease (0 if
--          none).
-- reply    {flags (1 allowed, 2 healed), limit, remaining, retry-after µs
--          (-1: never), reset-after µs, delay µs, the decision's instant
--          (µs since the Unix epoch), the level after it in units, units
--          per token of the level (0: none), the cost admitted in part}
--
-- Numbers: Redis's Lua has only doubles, exact for integers below 2^53.
-- Every quantity sluice keeps is below 2^52 (instants in µs up to 2112,
-- rates, costs, capacities), so the sums and products the Go twin takes in
-- int64 are exact here too, and so are quotients (see shared.lua).
-- States are packed as doubles, not written with tostring, which keeps
-- only 14 digits.

local now, cost, op, rate, period, burst, u, r, maxdebt, lease =
	unpackd('<dddddddddd', ARG, AT)
-- A partial admission (op 3, core.OpAtMost) is decided in two passes of
-- the decision (scripts.go): the first, before take is known, a peek of
-- cost 0, whose remaining is the most the key admits, with most the
-- request's cost; the second a charge of take, the least of the two, or
-- 1 when nothing fits (core.AtMost), for a batch the least over its
-- requests.
local most
if op == 3 then
	if take then
		cost, op = take, 0
	else
		most, cost, op = cost, 0, 1
	end
end
-- A key's TTL is the time until it is forgotten plus this margin, in ms:
-- a second on the server's clock; a minute for a request at an instant of
-- its own, whose clock has nothing to do with the one Redis expires keys
-- by (a replay, a test), so that a pause between its requests does not
-- drop a key it still needs. ontime says the decision is on the server's
-- clock, the one Redis expires keys by (see conclude.lua).
local margin, ontime = 60000, now < 0
if ontime then
	-- TIME in a script is safe since Redis 5: scripts replicate their
	-- effects, not themselves. Lua turns its two decimal strings into
	-- numbers in the arithmetic.
	if not clock then
		local t = redis.call('TIME')
		clock = t[1] * 1000000 + t[2]
	end
	now, margin = clock, 1000
end
local peek, refund = op == 1, op == 2

-- A value sluice cannot read (another client wrote the key: a wrong type,
-- a wrong length, numbers no state holds) is decided on as a missing key
-- and replaced in this call: healed (see conclude.lua). Every number of a
-- state is an integer of at most 2^53 in magnitude, so one outside that,
-- or NaN, which fails every comparison, cannot be sluice's.
--
-- In MultiScript, a key an earlier group wrote, or deleted, in this call
-- is read from PENDING, the writes it holds until its end (false for a
-- deletion), and any other from READ, the values the call read at its
-- start; a script of one decision has neither. A key READ has no value
-- for (missing, or not a string) is read with GET, whose error reply
-- tells a key of another type from a missing one.
local state = PENDING and PENDING[KEY]
if state == nil and READ then
	state = READ[KEY]
end
if state == nil then
	state = redis.pcall('GET', KEY)
end
local T, A, B, C, E, X = 0, 0, 0, 0, 0, 0
local healed = false
if type(state) == 'table' then -- an error reply: WRONGTYPE
	state, healed = false, true
elseif state then
	local size = #state
	if size ~= HEAD and (not ENTRIES or size < HEAD or (size - HEAD) % 16 ~= 0) then
		state, healed = false, true
	else
		T, A, B, C, E, X = unpackd('<dddddd', state)
		-- x % 1 is in [0, 1) for a finite x, 0 for an integer, and NaN
		-- for an infinity or NaN, so the sum is 0 only if all six
		-- are integers.
		if T % 1 + A % 1 + B % 1 + C % 1 + E % 1 + X % 1 ~= 0
			or T > MAXEXACT or T < -MAXEXACT or A > MAXEXACT or A < -MAXEXACT
			or B > MAXEXACT or B < -MAXEXACT or C > MAXEXACT or C < -MAXEXACT
			or E > MAXEXACT or E < -MAXEXACT or X > MAXEXACT or X < 0 then
			state, healed, T, A, B, C, E, X = false, true, 0, 0, 0, 0, 0, 0
		end
	end
end
-- Decide at max(now, T): a caller whose clock lags must not refill the
-- key from an instant before its last charge.
if now < T then
	now = T
end

-- The decision, which the algorithm's file fills in: the reply's numbers
-- (a denial's delay stays 0), the level among them; forget for a
-- decision that writes nothing, whose waits conclude.lua caps at E; and,
-- for one that writes, dirty, with the new state in T, A, B, C, E and,
-- after them, tail.
local allowed, limit, remaining, retry, reset, delay = false, 0, 0, 0, 0, 0
-- The level after the decision, units / per tokens (core.Level); per 0
-- for none.
local units, per = 0, 0
local forget, dirty, tail = false, false, nil
