package quotastate

// QueuedReservations returns how many reservations wait for st's
// transaction under way, to be decided together.
func QueuedReservations(st *State) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.batch.queue)
}
