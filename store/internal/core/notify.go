package core

import (
	"context"
	"sync/atomic"
)

// notifyKey carries a notification through a context to the transaction
// that sends it.
type notifyKey struct{}

// Notification is what a committing write tells the processes listening
// on Channel. When, if set, is asked after the update's fn ran: false
// sends nothing (on PostgreSQL every notifying commit takes one
// database-wide lock, so a write that frees nothing anyone waits for
// should not notify). News, if set, is asked then too: true counts the
// commit in the store value's news (News), whether or not When sends it.
type Notification struct {
	Channel, Payload string
	When             func() bool
	News             func() bool
}

// WithNotification returns ctx carrying n: an Update or UpdateMany run
// with it sends n when (and only when) its transaction commits a write.
func WithNotification(ctx context.Context, n Notification) context.Context {
	return context.WithValue(ctx, notifyKey{}, n)
}

// NotificationFrom returns the notification ctx carries.
func NotificationFrom(ctx context.Context) (Notification, bool) {
	n, ok := ctx.Value(notifyKey{}).(Notification)
	return n, ok
}

// News counts the commits made through one store value that carried news
// (Notification.News): every process sharing the value reads the count
// in one atomic load (store.Newsboard).
type News struct{ n atomic.Uint64 }

// Count returns how many commits carried news so far.
func (c *News) Count() uint64 { return c.n.Load() }

// Committed counts a commit of an update run with ctx when its
// notification says it carried news. Call it once the commit is done, or
// (the memory store) before the rows it wrote can be read.
func (c *News) Committed(ctx context.Context) {
	if n, ok := NotificationFrom(ctx); ok && n.News != nil && n.News() {
		c.n.Add(1)
	}
}
