package quotastate

import (
	"time"

	"github.com/ratekeeper/ratekeeper/quota"
)

// QueuedReservations returns how many reservations wait for st's
// transaction under way, to be decided together.
func QueuedReservations(st *State) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.batch.queue)
}

// FlushDue reports whether st's timer found the transaction turn taken and
// left the answers waiting to whoever holds it.
func FlushDue(st *State) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.batch.flushDue
}

// UseBlockClock makes st's blocks (ahead.go) read now instead of the
// system's clock.
func UseBlockClock(st *State, now func() time.Time) {
	st.blocks.mu.Lock()
	defer st.blocks.mu.Unlock()
	st.blocks.now = now
}

// ExpireBlocks runs st's expiry of blocks now, as its timer would.
func ExpireBlocks(st *State) { st.expireBlocks() }

// BlockMaxAge is how long a block hands out units.
const BlockMaxAge = quota.BlockMaxAge

// OpenBlocks reports how many of st's blocks hand out units.
func OpenBlocks(st *State) int {
	st.blocks.mu.Lock()
	defer st.blocks.mu.Unlock()
	return len(st.blocks.open)
}

const BlockFlushDelay = blockFlushDelay
