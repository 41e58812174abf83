package algorithms

import (
	_ "embed" // the Lua twins
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/core"
)

// Each algorithm's Lua twin is a decision: prelude.lua, its own file and
// conclude.lua. A script of one decision is shared.lua and the decision as
// the script's own code, on KEYS[1] and ARGV[1], then its write and its
// reply; see [Script] for the calling convention. [MultiScript] decides
// several requests at once, in a loop whose body is one decision by the
// request's algorithm.
//
// Redis runs a script's code afresh on each call, so every function a
// script defines is a new closure on every call: every script keeps to
// the few helpers of shared.lua, and MultiScript runs its decisions in a
// loop rather than as functions.
var (
	//go:embed shared.lua
	shared string
	//go:embed prelude.lua
	prelude string
	//go:embed conclude.lua
	conclude string
	//go:embed portable.lua
	portableLua string
	//go:embed tokenbucket.lua
	tokenBucketLua string
	//go:embed gcra.lua
	gcraLua string
	//go:embed fixedwindow.lua
	fixedWindowLua string
	//go:embed slidingcounter.lua
	slidingWindowCounterLua string
	//go:embed slidinglog.lua
	slidingWindowLogLua string
	//go:embed concurrency.lua
	concurrencyLua string

	tokenBucketScript          = single(tokenBucketLua, false)
	gcraScript                 = single(gcraLua, false)
	fixedWindowScript          = single(fixedWindowLua, false)
	slidingWindowCounterScript = single(slidingWindowCounterLua, false)
	slidingWindowLogScript     = single(slidingWindowLogLua, true)
	concurrencyScript          = single(concurrencyLua, true)

	// twins lists the algorithms in MultiScript, in its order.
	twins = []struct {
		script  *Script
		lua     string
		entries bool // whether its states hold entries (prelude.lua's ENTRIES)
	}{
		{tokenBucketScript, tokenBucketLua, false},
		{gcraScript, gcraLua, false},
		{fixedWindowScript, fixedWindowLua, false},
		{slidingWindowCounterScript, slidingWindowCounterLua, false},
		{slidingWindowLogScript, slidingWindowLogLua, true},
		{concurrencyScript, concurrencyLua, true},
	}
	multiScript = multi()
)

// single returns the script of one decision by an algorithm, whose states
// hold entries if entries is set: it writes at once, since nothing
// follows.
//
// A partial admission is decided in two passes of the decision (see
// prelude.lua): the first finds take, the second charges it.
func single(lua string, entries bool) *Script {
	return NewScript(shared + fmt.Sprintf("local KEY, ARG, AT, ENTRIES, PENDING, READ = KEYS[1], ARGV[1], 1, %t, nil, nil\n", entries) + `
local take -- a partial admission's charge, once its first pass found it
for pass = 1, 2 do
` + prelude + lua + conclude + `
if most then
	take = max(min(remaining, most), 1)
else
	if keep then
		redis.call('SET', KEY, value, 'KEEPTTL')
	elseif dirty then
		redis.call('PSETEX', KEY, ttl, value)
	elseif healed then
		redis.call('DEL', KEY)
	end
	return reply
end
end
`)
}

// multi returns MultiScript: a loop over groups of requests, each group a
// loop over its requests whose body is one decision (see writeDecision).
// A group of partial admissions runs its loop twice: the first pass finds
// the most every request admits, the second charges every request that.
// A group's writes wait for its end, and are made only if every request
// of the group was admitted; all the writes wait in PENDING, where later
// groups read them, until the call's end, so that a key written by many
// groups is written once; every key is read once, at the call's start.
func multi() *Script {
	var b strings.Builder
	b.WriteString(shared)
	b.WriteString(`
-- KEYS[i] is the i-th request's state; ARGV[1] the requests, packed as
-- one decision's ARGV[1] is, one after another; ARGV[2] one byte a
-- request, the index of its algorithm; ARGV[3] one byte a request, 1
-- where a group begins and 0 for a request in the group of the one
-- before. The reply is each decision's packed reply, one after another.
-- KEYS and ARGV's three strings are held in locals: a global is looked up
-- by name at each use, and every request reads them.
local KEYS, ARGS, ALGS, GROUPS = KEYS, ARGV[1], ARGV[2], ARGV[3]
local n = #KEYS
local size = #ARGS / n
local out, nout = {}, 0 -- the replies, nout of them
-- The writes, their TTLs (none for a key that keeps its own, see
-- conclude.lua), their keys in turn.
local PENDING, pttl, order, norder = {}, {}, {}, 0
-- Every distinct key's value, read at the start by MGET (a few hundred
-- keys at a time, within what unpack may return): one command reads them
-- all, where a GET each would cost Redis a command a request, and a key
-- that many requests share (a hot key's) is read once, not once for each.
-- A missing key, or one that is not a string, is left out, for its
-- decision to GET.
local READ, distinct, nd = {}, {}, 0
for i = 1, n do
	local k = KEYS[i]
	if READ[k] == nil then
		READ[k], nd = false, nd + 1
		distinct[nd] = k
	end
end
for first = 1, nd, 256 do
	local last = min(first + 255, nd)
	local got = redis.call('MGET', unpack(distinct, first, last))
	for i = first, last do
		READ[distinct[i]] = got[i - first + 1] or nil
	end
end
local wkeys, wttls, wvalues, whealed, unread = {}, {}, {}, {}, {}
-- The last decision that wrote nothing, charged no partial admission and
-- healed nothing: the state it read (a value, or false for none), its
-- algorithm, its request's bytes, its reply and whether it admitted. A
-- decision is a function of these and the script's clock alone, so a
-- request that repeats it on the same state gets its reply without being
-- decided again: the many denials of a hot key in one call cost a
-- comparison each.
local lstate, lalg, larg, lreply, lallowed
local g = 1
while g <= n do
local h = g -- the group is requests g to h
while h < n and byte(GROUPS, h + 1) == 0 do
	h = h + 1
end
local all = true
-- The group's writes, nw of them, and the healed keys it leaves
-- unwritten, nu of them, in tables every group reuses: a table made a
-- group would cost Redis an allocation and its collection.
local nw, nu = 0, 0
-- A group of partial admissions makes two passes (prelude.lua): the first
-- finds fits, the most every request admits, at most its cost; the
-- second charges every request take.
local take, fits
for pass = 1, 2 do
for i = g, h do
local KEY, ARG, AT = KEYS[i], ARGS, size * (i - 1) + 1
local alg = byte(ALGS, i)
local arg -- the request's bytes, where its state is the last decision's
if lstate ~= nil and alg == lalg and not take then
	-- The state the decision reads (see prelude.lua).
	local seen = PENDING[KEY]
	if seen == nil then
		seen = READ[KEY]
	end
	if seen == lstate then
		arg = sub(ARG, AT, AT + size - 1)
	end
end
if arg and arg == larg then
	nout = nout + 1
	out[nout] = lreply
	all = all and lallowed
else
`)
	writeDecision(&b)
	b.WriteString(`if most then
	fits = min(fits or most, most, remaining)
else
	nout = nout + 1
	out[nout] = reply
	all = all and allowed
	if dirty then
		nw = nw + 1
		wkeys[nw], wttls[nw], wvalues[nw], whealed[nw] = KEY, ttl or false, value, healed
	elseif healed then
		nu = nu + 1
		unread[nu] = KEY
	elseif not take then
		-- The state it read, unless by GET (not in PENDING or READ).
		local seen = PENDING[KEY]
		if seen == nil then
			seen = READ[KEY]
		end
		if seen ~= nil then
			lstate, lalg, larg, lreply, lallowed = seen, alg, arg or sub(ARG, AT, AT + size - 1), reply, allowed
		end
	end
end
end
end
if not fits then
	break
end
take, fits = max(fits, 1), nil
end
if all then
	for j = 1, nw do
		local k = wkeys[j]
		if PENDING[k] == nil then
			norder = norder + 1
			order[norder] = k
		end
		-- A write that keeps the key's TTL after one that sets it in
		-- this call leaves that TTL to be set: the state it read was
		-- the pending one, whose X is that TTL's.
		PENDING[k] = wvalues[j]
		if wttls[j] then
			pttl[k] = wttls[j]
		end
	end
else
	for j = 1, nw do
		if whealed[j] then
			nu = nu + 1
			unread[nu] = wkeys[j]
		end
	end
end
-- A healed key the group does not write is deleted: it reads from now on
-- as the missing key it was decided as.
for j = 1, nu do
	local k = unread[j]
	if PENDING[k] == nil then
		norder = norder + 1
		order[norder] = k
	end
	PENDING[k] = false
end
g = h + 1
end
-- Each TTL is sent as its digits, made once for the writes that share it
-- (many keys' under one limit): Redis would format a number for every
-- write, with %.17g.
local digits = {}
for j = 1, norder do
	local k = order[j]
	local ttl = pttl[k]
	if not PENDING[k] then
		redis.call('DEL', k)
	elseif ttl then
		local d = digits[ttl]
		if not d then
			d = string.format('%d', ttl)
			digits[ttl] = d
		end
		redis.call('PSETEX', k, d, PENDING[k])
	else
		redis.call('SET', k, PENDING[k], 'KEEPTTL')
	end
end
return table.concat(out)
`)
	return NewScript(b.String())
}

// writeDecision writes one decision by the algorithm whose MultiIndex is
// alg, for a request on KEY, ARG and AT: prelude.lua, the algorithm's file
// chosen by an if-chain, and conclude.lua, as straight-line code like a
// single script's, so that a call makes no closure per algorithm.
func writeDecision(b *strings.Builder) {
	b.WriteString("local ENTRIES = false\n")
	for i, t := range twins {
		if t.entries {
			fmt.Fprintf(b, "ENTRIES = ENTRIES or alg == %d\n", i+1)
		}
	}
	b.WriteString(prelude)
	for i, t := range twins {
		if i == 0 {
			fmt.Fprintf(b, "if alg == %d then\n", i+1)
		} else {
			fmt.Fprintf(b, "elseif alg == %d then\n", i+1)
		}
		b.WriteString(t.lua)
	}
	b.WriteString("end\n")
	b.WriteString(conclude)
}

// MultiScript returns the Lua script that decides, in one call, groups of
// requests, each group all or nothing, as [core.Store]'s ApplyAll asks,
// for a group of any one operation (charges, peeks, refunds,
// reservations, partial admissions, concurrency leases), and the groups in
// turn, each seeing the writes of those before it. KEYS are the requests'
// states; ARGV[1] their packed requests one after another (each as
// [Script] packs one); ARGV[2] one byte a request, its algorithm's
// [MultiIndex]; ARGV[3] one byte a request, 1 where a group begins and 0
// for a request in the group of the one before. The reply is each
// decision's packed reply (see [Script]) in turn. A group's states are written only if
// every request of the group was admitted; a group of partial admissions
// charges every request the same cost, as [core.RunAll] does. A group of
// one request decides as the request's own script would.
//
// Redis stores use it for a stack's requests whose keys share a Cluster
// slot, and on one Redis node to decide the requests and stacks of
// concurrent callers in one call, which costs the server less than a call
// each. A request that repeats, on the same state, the call's last
// decision that wrote nothing (a hot key's denials) gets its reply
// without being decided again. A script error (Redis out of memory at a
// write, say) fails the whole call; the writes are made at its end, so a
// failure at one may leave those before it made.
func MultiScript() *Script { return multiScript }

// MultiIndex returns the index of alg's Lua twin in [MultiScript], from 1,
// or 0 if it has none there (an algorithm of your own). A [core.Named]
// algorithm has its base algorithm's index.
func MultiIndex(alg core.Algorithm) int {
	script := ScriptOf(alg)
	if script == nil {
		return 0
	}
	for i, t := range twins {
		if t.script == script {
			return i + 1
		}
	}
	return 0
}

// Script returns the token bucket's Lua twin.
func (*tokenBucket) Script() *Script { return tokenBucketScript }

// Script returns GCRA's Lua twin.
func (*gcra) Script() *Script { return gcraScript }

// Script returns the fixed window's Lua twin.
func (*fixedWindow) Script() *Script { return fixedWindowScript }

// Script returns the sliding window counter's Lua twin.
func (*slidingWindowCounter) Script() *Script { return slidingWindowCounterScript }

// Script returns the sliding window log's Lua twin.
func (*slidingWindowLog) Script() *Script { return slidingWindowLogScript }

// Script returns the concurrency algorithm's Lua twin.
func (*concurrency) Script() *Script { return concurrencyScript }

var (
	_ Scripted = (*tokenBucket)(nil)
	_ Scripted = (*gcra)(nil)
	_ Scripted = (*fixedWindow)(nil)
	_ Scripted = (*slidingWindowCounter)(nil)
	_ Scripted = (*slidingWindowLog)(nil)
	_ Scripted = (*concurrency)(nil)
)
