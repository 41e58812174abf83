// Package redisengine is the one Redis engine under both Redis stores:
// redisstore (go-redis) and rueidisstore (rueidis) are thin adapters
// that only send commands ([Client]). The [Engine] does everything else
// once: the layout of the keys ([Key]), the packed request an algorithm's
// Lua twin reads and the checks on its reply (see algorithms.Script),
// the scripts and their fallbacks (EVAL on NOSCRIPT; the portable form
// on a server whose Lua lacks the struct library), TRYAGAIN, the merging
// of concurrent callers' decisions into one script call ([Queue]), and
// the marking of errors where they are received ([Code]; docs/outages.md
// has the table).
//
// It lives under stores/internal, beside its only users: the two Redis
// stores and the layered store's tests; tools above the stores use the
// stores' exported API.
package redisengine
