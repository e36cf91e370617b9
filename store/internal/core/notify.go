package core

import "context"

// notifyKey carries a notification through a context to the transaction
// that sends it.
type notifyKey struct{}

// Notification is what a committing write tells the processes listening
// on Channel. When, if set, is asked after the update's fn ran: false
// sends nothing (on PostgreSQL every notifying commit takes one
// database-wide lock, so a write that frees nothing anyone waits for
// should not notify).
type Notification struct {
	Channel, Payload string
	When             func() bool
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
