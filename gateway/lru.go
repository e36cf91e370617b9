package gateway

import "container/list"

// lru is a map of at most max entries that forgets the least recently
// used (got or added) beyond that. It is not safe for concurrent use.
type lru[K comparable, V any] struct {
	max   int
	items map[K]*list.Element
	order *list.List // of *lruItem[K, V], most recently used first
}

type lruItem[K comparable, V any] struct {
	key K
	val V
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	return &lru[K, V]{max: max, items: map[K]*list.Element{}, order: list.New()}
}

// get returns k's value and marks it used.
func (c *lru[K, V]) get(k K) (V, bool) {
	el, ok := c.items[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*lruItem[K, V]).val, true
}

// add sets k's value, marks it used and forgets the least recently used
// entries beyond max.
func (c *lru[K, V]) add(k K, v V) {
	if el, ok := c.items[k]; ok {
		el.Value.(*lruItem[K, V]).val = v
		c.order.MoveToFront(el)
		return
	}
	c.items[k] = c.order.PushFront(&lruItem[K, V]{key: k, val: v})
	for c.order.Len() > c.max {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.items, old.Value.(*lruItem[K, V]).key)
	}
}

func (c *lru[K, V]) remove(k K) {
	if el, ok := c.items[k]; ok {
		c.order.Remove(el)
		delete(c.items, k)
	}
}

func (c *lru[K, V]) len() int { return c.order.Len() }

// values returns the values, most recently used first.
func (c *lru[K, V]) values() []V {
	out := make([]V, 0, c.order.Len())
	for el := c.order.Front(); el != nil; el = el.Next() {
		out = append(out, el.Value.(*lruItem[K, V]).val)
	}
	return out
}
