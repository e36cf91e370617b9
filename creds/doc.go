// Package creds holds the credentials ratekeeper spends quota with: loading
// them (tokens from environment variables, GitHub App installations),
// showing them without revealing them, tracking whether each one can be used
// and learning which ones share a server-side bucket.
//
// # Rotation is for distinct, legitimate quota sources
//
// A pool with several credentials lets the client use whichever can go
// soonest. That is meant for quota sources that are separate by design: the
// installations of a GitHub App (each installation has its own limit; this is
// the way GitHub offers to get more quota), separate bot or service accounts
// that exist for their own reasons, and different providers. GitHub's terms
// forbid creating or sharing accounts or tokens to exceed its rate limits, and
// it would not work anyway: all personal tokens of one GitHub user spend one
// 5,000-requests-per-hour bucket. ratekeeper therefore learns which tokens
// share a bucket — from the counters of the answers to the caller's own
// requests ([Learner]), or where they cannot tell from the token's owner
// ([Validate]) — and counts them as one bucket ([Credential.BucketOwner]).
//
// # Secrets
//
// A token is obtained only with [Credential.Token], to be put into the auth
// header of a request to its own provider. Everything printable shows the
// masked form, such as "#2 ghp_…a1b2": the credential's index in its pool, the
// token's well-known prefix if it has one, an ellipsis and at most the last
// four characters (fewer for short tokens: never more than a quarter of the
// part after the prefix). String, every fmt verb, slog and encoding/json all
// print that form. Errors from this package never contain a token.
//
// # States
//
// Each credential is unknown until used or validated, then available, or
// invalid (terminal, with a reason). Whether its quota is spent is not its
// state: quota belongs to its owner's buckets, one per resource, which the
// transport keeps, so a refusal on one resource never blocks another.
// Transitions take the current time as an argument and never read a clock,
// so callers and tests decide what "now" is; they are safe for concurrent
// use. Choosing the credential that can go soonest needs quota information
// and is done by the transport; a [Pool] offers what that choice needs
// ([Pool.AppendTurn], [Credential.BucketOwner]) and keeps the round-robin
// state that breaks ties.
//
// Layer 1 of docs/architecture.md: it owns credentials, their states and
// what their answers say of their owners, and must not parse headers or
// pace.
package creds
