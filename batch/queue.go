package batch

import (
	"container/heap"
	"slices"
)

// readyQueue orders the requests that may be sent: smaller priority first
// (1 before 2, as tasks and fetch order theirs),
// then the order they were added — so a request that waited for quota,
// keeping its place, goes before work added while it waited.
//
// Requests of one priority are taken in the order they were added, so
// when one comes back from waiting, every request of its priority not yet
// tried was added after it: each priority keeps the requests that came
// back in a small heap by order of addition, taken first, and the others
// in a FIFO. Taking the next request costs O(1) however long the queue,
// but for those that came back.
type readyQueue struct {
	levels []*level // by priority, smaller first
	n      int
}

type level struct {
	priority int
	back     seqQueue // requests that waited for quota
	fresh    []*item  // requests not yet tried, from head on
	head     int
}

func (q *readyQueue) len() int { return q.n }

func (q *readyQueue) level(p int) *level {
	i, found := slices.BinarySearchFunc(q.levels, p, func(l *level, p int) int { return l.priority - p })
	if !found {
		q.levels = slices.Insert(q.levels, i, &level{priority: p})
	}
	return q.levels[i]
}

// add queues a request not yet tried.
func (q *readyQueue) add(it *item) {
	l := q.level(it.priority)
	l.fresh = append(l.fresh, it)
	q.n++
}

// putBack queues a request that waited for quota, in its place.
func (q *readyQueue) putBack(it *item) {
	heap.Push(&q.level(it.priority).back, it)
	q.n++
}

// take removes and returns the next request; nil when there is none.
func (q *readyQueue) take() *item {
	for _, l := range q.levels {
		if len(l.back) > 0 {
			q.n--
			return heap.Pop(&l.back).(*item)
		}
		if l.head < len(l.fresh) {
			it := l.fresh[l.head]
			l.fresh[l.head] = nil
			l.head++
			if l.head == len(l.fresh) {
				l.fresh, l.head = l.fresh[:0], 0
			} else if l.head > 1024 && l.head > len(l.fresh)/2 {
				l.fresh = l.fresh[:copy(l.fresh, l.fresh[l.head:])]
				l.head = 0
			}
			q.n--
			return it
		}
	}
	return nil
}

// drain removes and returns every request.
func (q *readyQueue) drain() []*item {
	var out []*item
	for _, l := range q.levels {
		out = append(out, l.back...)
		out = append(out, l.fresh[l.head:]...)
	}
	*q = readyQueue{}
	return out
}

// seqQueue orders requests by when they were added.
type seqQueue []*item

func (q seqQueue) Len() int           { return len(q) }
func (q seqQueue) Less(i, j int) bool { return q[i].seq < q[j].seq }
func (q seqQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *seqQueue) Push(x any)        { *q = append(*q, x.(*item)) }
func (q *seqQueue) Pop() any          { return popLast((*[]*item)(q)) }

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
func (q timeQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *timeQueue) Push(x any) {
	it := x.(*item)
	it.index, it.queue = len(*q), q
	*q = append(*q, it)
}
func (q *timeQueue) Pop() any {
	it := popLast((*[]*item)(q)).(*item)
	it.index, it.queue = -1, nil
	return it
}

func popLast(q *[]*item) any {
	old := *q
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return it
}
