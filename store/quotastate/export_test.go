package quotastate

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
