// Package quota holds the state of rate-limit buckets and the pacing math.
//
// Everything here is a pure function of a state value, a reading and the
// time passed in: no I/O, no clock, no sleeping. The transport keeps the
// state (in memory, or in a shared store for several processes), asks
// Reserve whether a request may go and how long to wait otherwise, and
// feeds every response back with Observe.
//
// A [Bucket] is one server-side quota, identified by (provider, owner,
// resource). Its budget is remaining − in flight − reserve: a request in
// flight has spent quota the server has not reported yet. Reservations are
// held per process and lapse after a lease, so a crashed process cannot
// pin a bucket forever. Readings may arrive out of order; within one window
// (same reset, give or take a second) remaining only falls, and a later
// reset starts a new window. A bucket whose reset has passed is assumed
// refilled to its limit until the next reading says otherwise.
//
// Pacing is a GCRA: each reservation pushes the theoretical arrival time
// by the policy's interval, recomputed from the current budget and
// time-to-reset, so the rate follows what the server says continuously:
//
//   - spread: time-to-reset ÷ (budget × velocity), velocity 1.5 by default;
//   - adaptive: time-to-reset ÷ budget × a health multiplier (1 above 50 %
//     left, 1.5 from 20 %, 2 from 5 %, 4 below), clamped to [min, max];
//   - greedy: no spacing, only the budget (down to the reserve).
//
// When the budget is spent the wait is until the reset plus a small grace
// (an eightieth of the window, 50 ms to 1 s) against servers that round
// resets down or run a little behind.
//
// An [Owner] holds the secondary limits of one credential owner: a penalty
// after a secondary refusal (Retry-After; else until the reset when nothing
// is left; else 60 s, then exponential with full jitter), a cap on requests
// in flight, spacing between writes, and points per minute.
//
// [Read] parses a response on the local clock, correcting the server's
// clock skew estimated by [Skew] from the Date of its responses: this is
// the one place skew is corrected.
package quota
