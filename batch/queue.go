package batch

import "container/heap"

// readyQueue orders the requests that may be sent: larger priority first,
// then the order they were added — so a request that waited for quota,
// keeping its place, goes before work added while it waited.
type readyQueue []*item

func (q readyQueue) Len() int { return len(q) }
func (q readyQueue) Less(i, j int) bool {
	a, b := q[i], q[j]
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	return a.seq < b.seq
}
func (q readyQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *readyQueue) Push(x any)   { *q = append(*q, x.(*item)) }
func (q *readyQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return it
}

// timeQueue orders waiting requests by when they may go, then by the
// order they were added.
type timeQueue []*item

func (q timeQueue) Len() int { return len(q) }
func (q timeQueue) Less(i, j int) bool {
	if !q[i].until.Equal(q[j].until) {
		return q[i].until.Before(q[j].until)
	}
	return q[i].seq < q[j].seq
}
func (q timeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *timeQueue) Push(x any)   { *q = append(*q, x.(*item)) }
func (q *timeQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return it
}

var (
	_ heap.Interface = (*readyQueue)(nil)
	_ heap.Interface = (*timeQueue)(nil)
)
