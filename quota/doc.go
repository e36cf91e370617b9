// Package quota holds the state of rate-limit buckets and the pacing math.
//
// Everything here is a pure function of a state value, a reading and the
// time passed in: no I/O, no clock, no sleeping.
//
// One algorithm decides for every state store. [Reserve] takes a request's
// options (one per credential: its owner and its bucket) and decides, in
// the manner of x/time/rate's reserveN, which can go soonest and whether
// that is now: it computes first and commits only when both the owner's
// secondary limits and the bucket's quota allow, so a refusal changes
// nothing. [Settle] ends a reservation with what its answer said. A state
// store (the transport's memory, SQLite, PostgreSQL) only loads the values,
// calls these two under its lock or in one transaction, and writes back
// what changed.
//
// A [Bucket] is one server-side quota, identified by (provider, owner,
// resource). Its budget is remaining − in flight − reserve: a request in
// flight has spent quota the server has not reported yet. The reserve is a
// count or a percentage of the bucket's own limit; a count at or above the
// limit makes Reserve return a [ReserveError] rather than a wait that
// would never end. Each reservation
// holds its own [Lease] and lapses at its own time, so a crashed process
// cannot pin a bucket and no reservation renews another. A request may
// take several units of its bucket (Ask.Units: a GraphQL query's points):
// its lease holds them, the budget must hold them all, and the GCRA spaces
// them as that many requests; its owner counts it once. Readings may
// arrive out of order; within one window (same reset, give or take a
// second) remaining only falls, and a later reset starts a new window. A
// bucket counts as refilled to its limit at one moment, the same one a wait
// for it ends: the reset plus the grace below (or exactly at the end of a
// Retry-After), until the next reading says otherwise. A reading with
// remaining but no reset refills a window after the first reading of its
// window (the window it states, else the provider's default). Every pause
// a Retry-After or a penalty imposes is capped (Answer.MaxPause, an hour
// by default).
//
// Pacing is a GCRA: each reservation pushes the theoretical arrival time
// by the policy's interval, recomputed from the current budget and
// time-to-reset, so the rate follows what the server says continuously:
//
//   - spread: time-to-reset ÷ (budget × velocity), velocity 1.5 by default;
//   - adaptive: time-to-reset ÷ budget × the multiplier of the bucket's
//     health band (1 HEALTHY from 50 % left, 1.5 FAIR from 20 %, 2 WARNING
//     from 5 %, 4 CRITICAL below: the same bands status reports);
//   - greedy: no spacing, only the budget (down to the reserve).
//
// Every policy's spacing is clamped to [MinDelay, MaxDelay] (MinDelay
// spaces even greedy), and Burst requests may go back to back before it
// applies (a GCRA tolerance of Burst intervals).
//
// When the budget is spent the wait is until the reset plus a small grace
// (an eightieth of the window, 50 ms to 1 s) against servers that round
// resets down or run a little behind. A refusal whose reset is already
// past waits the grace, once, rather than retrying at once.
//
// An [Owner] holds the secondary limits of one credential owner: a penalty
// after a secondary refusal (Retry-After; else Secondary.Wait, 60 s by
// default, then exponential with full jitter, one strike per episode of
// refusals, and at least until the reset when nothing is left), a cap on
// requests in flight
// learnt from the server (a ramp from RampStart, lowered by a fresh
// refusal to the peak in flight minus one, held for CapHoldPauses pauses
// from the end of the pause, then raised by rounds of successes at its
// level),
// spacing between writes, and points per minute.
//
// [Read] parses a response on the local clock, correcting the server's
// clock skew estimated by [Skew] from the Date of its responses: this is
// the one place skew is corrected.
//
// Layer 1 of docs/architecture.md: it owns the pacing math, and must not do
// I/O, sleep or read the clock.
package quota
