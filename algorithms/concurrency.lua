-- concurrency.lua: the Lua twin of concurrency.go, run between
-- prelude.lua (which gives the calling convention: KEY the state, ARG the
-- packed request with its lease) and conclude.lua (which makes the reply
-- and the write).
--
-- State: T (Last) the last change (µs); A (Vals[ccHeld]) the slots held; E
-- (Expires) when the last lease expires; then the slots as pairs of
-- doubles (expiry µs, lease), 16 bytes each, live ones only. rate is how
-- many slots a key may hold, period a lease's time to live; lease 0 is
-- anonymous.

local slots = {} -- the live slots: {at, id}
if state and now < E then
	for i = 0, (#state - HEAD) / 16 - 1 do
		local at, id = unpackd('<dd', state, HEAD + 16 * i + 1)
		-- A slot of sluice's is an expiry and a lease, integers below
		-- 2^53; a state with any other is healed (see prelude.lua).
		if at % 1 + id % 1 ~= 0 or at > MAXEXACT or at < -MAXEXACT or id > MAXEXACT or id < -MAXEXACT then
			slots, healed = {}, true
			break
		end
		if at > now then
			slots[#slots + 1] = {at, id}
		end
	end
end
local live, mine, last = #slots, 0, 0
for _, s in ipairs(slots) do
	if s[1] > last then
		last = s[1]
	end
	if lease ~= 0 and s[2] == lease then
		mine = mine + 1
	end
end
-- keep writes the live slots, less the lease's if drop, less release
-- anonymous ones (the latest to expire first), plus add new slots of the
-- lease expiring at at; it returns the slots held and the last expiry.
local function keep(drop, release, add, at)
	local out = {}
	for _, s in ipairs(slots) do
		if not (drop and s[2] == lease) then
			out[#out + 1] = s
		end
	end
	while release > 0 do
		local i = nil
		for j, s in ipairs(out) do
			if s[2] == 0 and (i == nil or s[1] > out[i][1]) then
				i = j
			end
		end
		if i == nil then
			break
		end
		table.remove(out, i)
		release = release - 1
	end
	for _ = 1, add do
		out[#out + 1] = {at, lease}
	end
	local e = now
	local parts = {}
	for i, s in ipairs(out) do
		if s[1] > e then
			e = s[1]
		end
		parts[i] = packd('<dd', s[1], s[2])
	end
	T, A, B, E, tail, dirty = now, #out, 0, e, table.concat(parts), true
	return #out, e
end
-- held and ending: the slots the reply counts and when the last expires.
local held, ending = live, last
allowed = true
if refund and lease ~= 0 then
	if mine > 0 then
		held, ending = keep(true, 0, 0, 0)
	end
elseif refund then
	if live > 0 and cost > 0 then
		held, ending = keep(false, cost, 0, 0)
	end
elseif mine > 0 and cost > 0 then
	-- Renew: the lease's slots expire a period from now.
	if not peek then
		keep(true, 0, mine, now + period)
	end
	ending = max(last, now + period)
elseif cost > rate then
	allowed, retry = false, NEVER
elseif live + cost > rate then
	-- The request passes once live + cost - rate slots have expired.
	local exp = {}
	for i, s in ipairs(slots) do
		exp[i] = s[1]
	end
	table.sort(exp)
	allowed, retry = false, exp[live + cost - rate] - now
elseif cost > 0 then
	if not peek then
		keep(false, 0, cost, now + period)
	end
	held, ending = live + cost, max(last, now + period)
end
limit, remaining, reset = rate, max(rate - held, 0), max(ending - now, 0)
units, per = rate - held, 1
