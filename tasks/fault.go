package tasks

import (
	"errors"
	"io"
	"net"
	"net/http"
)

// A task's outcome must come from where its work is done: an http task's
// from the server (an answer, or the network failing to reach it), not
// from this machine. A database that went bad, a full disk, a store that
// cannot be read: faults like these say nothing about the task, and
// recording one as the task's outcome (after spending its retries on it)
// would make a healthy rerun skip work that was never done. So they travel
// apart from ordinary errors, marked by LocalFault, and end the attempt
// without counting it.

// localFaultError marks an error that arose on this machine.
type localFaultError struct{ err error }

func (e *localFaultError) Error() string { return e.err.Error() }
func (e *localFaultError) Unwrap() error { return e.err }

// LocalFault wraps err, an error that arose on this machine rather than in
// the task's work (a database, the disk), so that the attempt ends without
// an outcome: the task goes back to pending at once, counted neither as a
// retry nor as a reschedule, and the worker stops, Work returning an error
// that IsLocalFault recognises. LocalFault(nil) is nil.
func LocalFault(err error) error {
	if err == nil || IsLocalFault(err) {
		return err
	}
	return &localFaultError{err: err}
}

// IsLocalFault reports whether err's chain holds an error made by
// LocalFault.
func IsLocalFault(err error) bool {
	var l *localFaultError
	return errors.As(err, &l)
}

// WireTransport wraps rt, the round tripper that puts requests on the
// network (an *http.Transport), so that what fails there says so: its
// errors, and errors reading the bodies of its responses, carry a mark
// that FromWire finds through any wrapping. Give it as the base of the
// rate-keeping transport and set Options.WireMarked: the http type then
// tells a failure of the network or the server (an outcome, once retries
// run out) from any other error of the client, which can only have arisen
// on this machine (its quota state's database, say).
func WireTransport(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return wireTransport{rt}
}

type wireTransport struct{ rt http.RoundTripper }

func (w wireTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.rt.RoundTrip(req)
	if err != nil {
		return nil, &wireError{err}
	}
	if resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = wireBody{resp.Body}
	}
	return resp, nil
}

// CloseIdleConnections passes http.Client.CloseIdleConnections on.
func (w wireTransport) CloseIdleConnections() {
	if c, ok := w.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// wireBody marks the errors of reading a response body off the network.
type wireBody struct{ io.ReadCloser }

func (b wireBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = &wireError{err}
	}
	return n, err
}

// wireError is an error of the network or the server, as WireTransport
// saw it.
type wireError struct{ err error }

func (e *wireError) Error() string { return e.err.Error() }
func (e *wireError) Unwrap() error { return e.err }

// Timeout and Temporary keep what net.Error says of the error visible to
// those that ask the error directly (url.Error does).
func (e *wireError) Timeout() bool {
	var ne net.Error
	return errors.As(e.err, &ne) && ne.Timeout()
}

func (e *wireError) Temporary() bool {
	var t interface{ Temporary() bool }
	return errors.As(e.err, &t) && t.Temporary()
}

// FromWire reports whether err's chain holds an error of a WireTransport:
// the network or the server failed.
func FromWire(err error) bool {
	var w *wireError
	return errors.As(err, &w)
}

// sendFailure says what the http type makes of err, the error of a request
// that got no usable answer. Pure.
//
// Unchanged (a failed attempt, or a reschedule for an error carrying
// RetryAt) when the attempt itself ended (timeout, shutdown, cancel: the
// worker decides from how it ended), when the server answered (a redirect
// the client refused to follow), when the error came from the wire, or
// when the client does not mark its wire errors (wireMarked false: nothing
// can be told then), or when the client gave the request back unsent as
// the worker stops (ErrStopping). Otherwise it arose on this machine: a
// LocalFault.
func sendFailure(err error, attemptEnded, answered, wireMarked bool) error {
	var ra retryAter
	switch {
	case attemptEnded, answered, !wireMarked, FromWire(err), errors.As(err, &ra), errors.Is(err, ErrStopping):
		return err
	}
	return LocalFault(err)
}
