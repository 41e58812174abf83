// Package layered puts a bounded local cache in front of a remote store
// (any [core.Store], usually a Redis store), so that a key far over its
// limit, or a hot key whose budget is taken an allotment at a time, costs
// the remote almost nothing.
//
// The cache is a golang-lru/v2 LRU of [Config.Size] keys (key and
// algorithm pairs), split into up to 16 locked shards. It starts no
// goroutine: a cached entry carries its own deadline and is checked when
// read. Decisions say where they came from: [core.SourceStore] (the remote
// decided), [core.SourceCache] (a denial served locally) or
// [core.SourceAllotment] (spent from an allotment).
//
// # Deny cache
//
// When the remote denies a request of cost c under limit L with RetryAfter
// r, the store remembers it: until r has passed on the local clock, counted
// from when the call was sent, requests for the key under the same
// algorithm and limit L with a cost from c to the limit's capacity are
// denied locally. RetryAfter then counts down to the same instant, which is
// exact for cost c and a lower bound for larger costs (the retry goes to
// the remote, which tells the exact wait). Remaining is the remote's at the
// denial; ResetAfter the remote's, counted down.
//
// This never denies a request the remote would admit, short of a Reset or
// a refund done elsewhere in the fleet: every algorithm admits a cost only
// once the key holds enough for it, what a key holds grows with time only
// while nothing is charged, and a larger cost needs at least as much (the
// package's tests check this of every algorithm). The store never answers
// "allowed" from the cache. Requests that go to the remote instead: a cost
// smaller than the cached one (it may pass sooner), a cost of zero, a cost
// above the capacity (the remote answers it as unsatisfiable, without a
// wait, and such answers are not cached), requests under another limit,
// refunds ([core.OpRefund]), reservations ([core.OpReserve], which may
// be admitted with a delay where a plain request is denied) and partial
// admissions ([core.OpAtMost], which admit what fits where a larger cost
// is denied; their denials are not cached either). A peek is
// answered like the request it asks about. A charge or a refund admitted through the store drops the key's
// cached denial, whose Remaining it made stale or which it may have made
// wrong. [Config.MaxDeny] caps how long a denial is served.
//
// A request with an explicit [core.Terms.Now] names an instant, not a
// clock, and the store cannot know how a caller's instants will move
// (replays run faster than time, traces run backwards). Such requests are
// never allotted, and a denial decided at an explicit instant answers only
// requests at that same instant, of the same cost and limit, with the
// remote's numbers: exactly the remote's decision, as the conformance
// suite checks.
//
// While the remote fails, cached denials are still served until they
// lapse; every other request returns the remote's error, wrapped.
//
// # Allotments
//
// With [Config.Allot] set, a request takes an allotment of tokens from the
// remote in one call (an ordinary request whose cost is the allotment's
// size, so the tokens are charged atomically to the budget the fleet
// shares) and later requests spend it locally, without a call, until it
// is spent or lapses after [Config.AllotmentTTL]. One caller takes an
// allotment for a key while the others wait for it (or for their
// contexts), so a hot key sends no herd of takes, and no lock is held
// across a remote call.
//
// Only algorithms that say their capacity may be allotted, by
// implementing [Allotter], are allotted: the token bucket, GCRA and the
// fixed window, the same under [core.Named] (a sluice.Stack's rules), and
// an algorithm of your own that implements it. The store asks its
// MaxAllotment, never which algorithm it is. Plain requests spend
// allotments, single ones and batches of them (below): peeks are answered
// from an allotment that holds enough but never take one; a refund goes
// back to the key's live allotment if the allotment has spent at least
// its cost since its take (those tokens were charged to the remote with
// the take), and to the remote otherwise; reservations and partial
// admissions go to the remote. An allotment never
// exceeds the algorithm's MaxAllotment for the limit (the burst, or the
// window's rate) nor what [Config.Allot] returns for the request, and a
// request of a larger cost goes to the remote. Under an algorithm whose
// capacity comes back all at once when a window ends (the fixed window;
// [Allotter]'s Windowed reports it), an allotment also lapses when the
// window it was taken in ends. The size of the next take adapts between 1
// and the configured size: it doubles when an allotment is spent before it
// lapses, and shrinks to what was spent of one that lapsed.
//
// When the remote cannot give a whole allotment but holds enough for the
// request, the store takes what it holds instead, and the next take
// starts from that size. When it holds less than the request, the key
// waits for a whole allotment: until the remote's RetryAfter for it,
// requests are denied locally ([core.SourceCache], Remaining 0). So over
// the limit admissions come an allotment at a time rather than one by one,
// which is what spares the remote a call per admission.
//
// What allotments trade, for a fleet of N instances taking allotments of
// at most B under a limit of burst b and rate ρ:
//
//   - Never more than the limit. Every token spent was charged to the
//     remote first, so from a fresh key the fleet admits at most what the
//     limit admits over the same span: b + ρ·w over w. Allotments only
//     move admissions later in time, each by less than the AllotmentTTL
//     V, so over an arbitrary span w the fleet admits at most
//     b + ρ·w + min(N·B, ρ·V) (the tokens held in allotments at the span's
//     start). Under the fixed window an allotment never outlives the
//     window it was taken in: at most the rate per window, exactly.
//   - Some under-admission. Tokens left in an allotment when it lapses, or
//     when a request needs more than is left, are lost (fewer than B per
//     instance and allotment); and a key waiting for a whole allotment is
//     denied while the remote holds fewer than B tokens (fewer than B per
//     wait). The package's tests measure it.
//   - Decisions from an allotment say Remaining as the remote's remaining
//     after the take plus what the allotment still holds, and ResetAfter
//     as the take's, counted down.
//
// # Batches
//
// [Store.ApplyAll] decides a batch (a sluice.Stack of several rules) as
// one unit. A charge that meets a live cached denial for any of its
// requests is denied here, with no round trip: the denied requests carry
// their cached decisions, and the others are reported allowed with a
// Limit of 0, since nothing was asked of them; all carry
// [core.SourceCache].
//
// A batch of charges or peeks whose every request is allotted (as it
// would be alone) is decided from the allotments, under the locks of all
// its keys' entries, taken in one fixed order: if every allotment holds
// its request's cost, all are spent together ([core.SourceAllotment]),
// with no round trip; if any key waits for a whole allotment, the batch
// is denied here and nothing is spent, the other requests saying what
// they would have got. A key whose allotment is spent takes a new one
// first, in a call of its own, as a single request would (a peek takes
// none), and the batch is decided once the takes are in. So a stack whose
// rules all have allotments costs the remote a take per allotment, not a
// call per decision, and stays all or nothing: no request is ever
// admitted that its key's allotment does not hold.
//
// Otherwise (a request that is not allotted, a peek of a key with no
// allotment, a key whose remote holds enough for the request but not a
// whole allotment) the whole batch goes to the remote in one
// ApplyAll, so it stays atomic, and each request's answer updates its own
// cached denial: a request denied in a batch is denied by its own state,
// and its denial is cached for later requests and batches alike; an
// admitted batch drops the denials its charges made stale, and an
// admitted refund batch drops its keys' denials. A request admitted in a
// denied batch charged nothing and leaves its key's denial as it was.
// Refund and reservation batches always go to the remote.
//
// Reset forwards to the remote and drops the key's denial and allotment;
// decisions whose remote call overlapped a Reset are not cached. Close
// drops the cache and closes the remote. The store keeps the decorator
// contract of package core, including Unwrap.
//
// docs/layered.md gives the measured figures.
package layered
