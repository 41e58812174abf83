// Package redisscript is what the Redis stores share: the layout of the keys they
// write, the packed request an algorithm's Lua twin reads (see
// [algorithms.Script]) and the checks on the reply it returns. It knows no Redis
// client; redisstore and rueidisstore each adapt theirs.
package redisscript
