-- portable.lua: struct.pack and struct.unpack of little-endian doubles
-- ('<' and a 'd' a number, the only formats the twins use), in plain Lua,
-- for a server whose Lua lacks Redis's struct library (miniredis). It
-- starts a script's portable form (Script.Portable), whose decisions are
-- those of the script itself, bit for bit: a double is written and read
-- whole, by its sign, exponent and 52-bit mantissa, each an integer that
-- Lua's doubles hold exactly, and math.frexp and math.ldexp are exact.
-- Real Redis runs the script itself: these functions are closures made
-- afresh on every call (see shared.lua), which only this form pays for.
--
-- Infinities and NaN (which no state of sluice's holds, but another
-- client may write) are read as struct reads them, so that prelude.lua
-- heals them alike.

local struct = {}
do
	local byte, char, floor, frexp, ldexp = string.byte, string.char, math.floor, math.frexp, math.ldexp
	local TWO52 = 4503599627370496

	-- get reads the double at s[i .. i + 7].
	local function get(s, i)
		local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, i, i + 7)
		local sign = 1
		if b8 >= 128 then
			sign = -1
		end
		local e = (b8 % 128) * 16 + floor(b7 / 16)
		local m = (((((b7 % 16) * 256 + b6) * 256 + b5) * 256 + b4) * 256 + b3) * 65536 + b2 * 256 + b1
		if e == 2047 then
			if m == 0 then
				return sign * math.huge
			end
			return 0 / 0
		elseif e == 0 then
			return sign * ldexp(m, -1074) -- subnormal, or zero
		end
		return sign * ldexp(m + TWO52, e - 1075)
	end

	-- put returns the eight bytes of the double x.
	local function put(x)
		local sign, e, m = 0, 0, 0
		if x < 0 or x == 0 and 1 / x < 0 then
			sign, x = 128, -x
		end
		if x ~= x then
			e, m = 2047, TWO52 / 2 -- a quiet NaN
		elseif x == math.huge then
			e = 2047
		elseif x > 0 then
			local f, ex = frexp(x) -- x = f * 2^ex, f in [0.5, 1)
			if ex >= -1021 then
				e, m = ex + 1022, (f * 2 - 1) * TWO52
			else
				m = ldexp(f, ex + 1074) -- subnormal
			end
		end
		local b = {}
		for i = 1, 6 do
			b[i] = m % 256
			m = floor(m / 256)
		end
		b[7] = m + (e % 16) * 16
		b[8] = sign + floor(e / 16)
		return char(b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8])
	end

	-- pack returns its numbers packed by format, '<' and a 'd' each.
	function struct.pack(format, ...)
		local parts = {}
		for i = 1, #format - 1 do
			parts[i] = put((select(i, ...)))
		end
		return table.concat(parts)
	end

	-- unpack returns the doubles that format ('<' and a 'd' each) reads
	-- from s at pos (1 if nil), then the position after them.
	function struct.unpack(format, s, pos)
		pos = pos or 1
		local n = #format - 1
		if #s < pos + 8 * n - 1 then
			error('struct.unpack: data string too short')
		end
		local out = {}
		for i = 1, n do
			out[i] = get(s, pos + 8 * (i - 1))
		end
		out[n + 1] = pos + 8 * n
		return unpack(out, 1, n + 1)
	end
end
