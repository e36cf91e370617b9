package creds

import "time"

// Usage is one reading of a bucket through one credential: what the server
// said about a resource's limit, how much of it was used and when it resets,
// and when the reading was taken.
type Usage struct {
	Resource string
	Limit    int
	Used     int
	Reset    time.Time
	At       time.Time
	// ServerReset and ServerAt are Reset and the answer's Date on the
	// server's own clock (headers.Reading.ServerReset, ServerTime), zero
	// without a Date. Two answers of one window agree on ServerReset
	// whatever each made of the server's clock, where Reset moves with
	// that estimate between them: the learner compares windows by it.
	ServerReset time.Time
	ServerAt    time.Time
	// Units is what the reading's own request counted, when more than
	// one: a GitHub GraphQL query counts its points (as priced before it
	// went). 0 means 1.
	Units int
}

// counts is what the reading's request counted: at least 1.
func (u Usage) counts() int { return max(u.Units, 1) }

// MaxUsageGap is how far apart two readings may be taken for [SameBucket] to
// compare them.
const MaxUsageGap = 2 * time.Second

// SameBucket infers that two credentials spend one server-side bucket from a
// reading of each. The inference is made only when all of these hold:
//
//   - both readings are of the same resource, with the same positive limit;
//   - both report the same used count, and it is above zero (a fresh bucket
//     reports 0 used and a reset one window ahead for everybody);
//   - both report the same reset, to the second;
//   - they were taken at most [MaxUsageGap] apart, by requests that do not
//     spend quota (GitHub's GET /rate_limit, or a 304), with no counted
//     request between them. The caller ensures this; with a counted request
//     in between, a shared bucket would show different counts.
//
// It is a heuristic for credentials whose owner validation could not
// establish; a known owner ([Credential.SetOwner]) is authoritative. It can
// be fooled by two buckets that started in the same second and were spent
// equally, so use it to be careful (treat the credentials as one bucket),
// never to spend more.
func SameBucket(a, b Usage) bool {
	gap := a.At.Sub(b.At)
	if gap < 0 {
		gap = -gap
	}
	return a.Resource == b.Resource &&
		a.Limit > 0 && a.Limit == b.Limit &&
		a.Used > 0 && a.Used == b.Used &&
		a.Reset.Unix() == b.Reset.Unix() && !a.Reset.IsZero() &&
		gap <= MaxUsageGap
}
