// Package limits loads the limits configuration of sluice-serve, the
// server of Envoy's rate limit service API. The format is that of Envoy's
// reference rate limit service (github.com/envoyproxy/ratelimit), so that
// a deployment's files load unchanged; sluice adds three keys of its own.
//
// A file declares one domain and a tree of descriptors:
//
//	domain: api
//	descriptors:
//	  - key: user                # any user: 100 a minute each
//	    rate_limit:
//	      unit: minute
//	      requests_per_unit: 100
//	  - key: user
//	    value: admin             # but admin is not limited
//	    rate_limit:
//	      unlimited: true
//	  - key: path
//	    value: /files/*          # a wildcard: every value beginning /files/
//	    share_threshold: true    # ... shares one counter
//	    rate_limit:
//	      unit: second
//	      requests_per_unit: 10
//	  - key: tenant
//	    descriptors:             # nested: (tenant, any) then (plan, free)
//	      - key: plan
//	        value: free
//	        rate_limit:
//	          limit: 10/s burst 50
//	          algorithm: token-bucket
//
// Each descriptor has a key, an optional value, an optional rate_limit
// and optional nested descriptors, and the flags shadow_mode,
// detailed_metric, value_to_metric, share_threshold (only on a wildcard
// value, one ending in "*") and quota_mode (which sluice does not
// support: true is an error). A rate_limit is unit (second, minute, hour,
// day, week, month of 30 days or year of 365 days, in any case) and
// requests_per_unit, or unlimited: true; with an optional name, and
// replaces, the names of the rules it replaces. requests_per_unit 0 (or
// none) is a rule that denies every request, as the service has it
// ([Rule.Deny]).
//
// A request descriptor, a list of key/value entries, finds its rule as
// [Set.Match] describes: each entry in turn finds a descriptor by key and
// value, else by a wildcard, else by key alone, and the rule is that of
// the descriptor the last entry finds. [Match] also gives the key of the
// rule's state ([Key]) and the name the service would give its stats.
//
// # sluice's keys
//
// In a rate_limit, sluice reads four keys the service rejects, so that a
// file that uses them is sluice's alone:
//
//   - algorithm: the algorithm to decide with, a name
//     [github.com/sluicehq/sluice/algorithms.ByName] accepts other than
//     concurrency. The default, fixed-window, is the service's own
//     epoch-aligned window.
//   - burst: the largest number of requests admitted at once, for the
//     token-bucket and gcra algorithms
//     ([github.com/sluicehq/sluice/core.Limit.WithBurst]).
//   - limit: the limit in sluice's text form
//     ([github.com/sluicehq/sluice/core.ParseLimit]), such as
//     "10/s burst 50" or "1/250ms", instead of unit and
//     requests_per_unit. Exactly one of limit, unit with
//     requests_per_unit, and unlimited: true may be given.
//   - allotment: the most of the rule's requests a server takes from the
//     store at once and spends locally ([Rule.Allotment], [Allotted]), for
//     the fixed-window, token-bucket and gcra algorithms, at most the
//     limit's capacity; 0 opts the rule out of [Options.Allotment]. The
//     key was named lease before; a configuration that still says lease
//     fails to load, naming allotment.
//
// # Problems
//
// [Parse] and [Load] check everything when a configuration is loaded and
// report every problem of every file, each as "file:line: message" (an
// [*Error]), joined:
//
//	limits/api.yaml:12: descriptor "user": invalid rate limit unit "minutes" (want second, minute, hour, day, week, month or year)
//
// Every configuration the service rejects is rejected. A configuration is
// bounded: a domain is 1 to 128 bytes; a key at most 256 and a value at
// most 512; descriptors nest at most [MaxDepth] deep; a set holds at most
// 131072 descriptors and a file at most 16 MiB; a rule replaces at most
// 64 others, each name at most 256 bytes.
//
// # Where sluice is stricter
//
// The service reads its files with yaml.v2 and checks little beyond the
// names of keys; sluice reads values as yaml.v2 does (yes and on are
// true, 0x10 is 16, 1.5 is an error everywhere), but rejects some files
// the service loads, each of which is a mistake that the service silently
// misreads:
//
//   - a key in the wrong place, such as unit in a descriptor or
//     shadow_mode in a rate_limit, which the service ignores;
//   - a second YAML document in a file, which the service ignores;
//   - an invalid unit with unlimited: true, which the service ignores;
//   - explicit YAML tags other than !!str;
//
// Every limit the service accepts loads: requests_per_unit up to
// 2^32−1 per any unit, on the fixed window ([WindowLimit]). sluice's
// token-bucket and gcra algorithms compute in units and decide only
// limits whose burst times the rate's unit (the period in microseconds
// over its greatest common divisor with the rate) is at most 2^52
// ([github.com/sluicehq/sluice/core.Limit.Validate]): 1000000 a year is
// fine, 4294967291 (a prime) a year is not.
//
// A key repeated in one mapping loads as the service reads it, the last
// winning, with a [Warning] naming the file and line ([Set.Warnings]).
// Anchors, aliases and merge keys (<<) work as in the service, explicit
// keys winning over merged ones.
//
// # Files
//
// [Load] reads a directory as the service's runtime loader does: every
// file, whatever its name, dot files too unless
// [Options.IgnoreDotFiles], and with [Options.AppDirectory] only the
// application directory's, as the service with RUNTIME_WATCH_ROOT.
package limits
