-- shared.lua: the start of every script: what all its decisions share.
-- A decision is prelude.lua, an algorithm's file and conclude.lua, run as
-- the script's own code in a script of one decision and in a loop in
-- MultiScript (see scripts.go).
--
-- Redis runs a script's code afresh on every call: each local function it
-- defines would be a new closure, made and later collected on every
-- decision, and a call of a Lua function costs more than the arithmetic
-- it wraps. So decisions are straight-line code that fills in variables,
-- with the integer divisions the Go twins make through core.CeilDiv and
-- integer division written out, as below.

local NEVER = -1 -- retry-after of a cost above capacity (core.RetryNever)
local MAXEXACT = 9007199254740992 -- 2^53: every number of a state is an integer below
local HEAD = 48 -- bytes of a state's six numbers, T, A, B, C, E, X (prelude.lua)
-- A key in use on the server's clock lives up to SLACK ms beyond its TTL's
-- margin, so that most of its writes keep its TTL (see conclude.lua).
local SLACK = 1000

-- Integer division, exact: for integers |a| < 2^53 and b >= 1, the double
-- a / b is off from the true quotient q by at most |q| * 2^-53 < 1 / b,
-- and a q that is not an integer is at least 1 / b from the integers on
-- either side of it, so rounding never carries a / b across an integer:
--
--   floor(a / b)          is ⌊a / b⌋: Go's a / b for a >= 0, floorDiv
--                         (tokenbucket.go) for any a;
--   ceil(a / b)           is core.CeilDiv(a, b) for a > 0;
--   max(ceil(a / b), 0)   is core.CeilDiv(a, b) for any a (0 for a <= 0).
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
-- The functions every decision calls, held in locals too: a global's name
-- is looked up in a table at each use, and a library's function in two.
-- The formats are little-endian doubles ('<d...'), the only ones used.
local packd, unpackd, byte, sub, type = struct.pack, struct.unpack, string.byte, string.sub, type

-- clock is the server's clock in µs, read once a script, so that every
-- decision of a script has the same instant.
local clock
