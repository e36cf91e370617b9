package sim

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
)

// Transport returns an http.RoundTripper that answers every request by
// calling the server's ServeHTTP in the calling goroutine, whatever the
// request's host: no sockets, so a client driven inside a testing/synctest
// bubble sees latency and windows pass in fake time. Requests appear to come
// from remoteAddr (e.g. "127.0.0.1:40000"); "" means "127.0.0.1:1". A
// dropped-connection fault surfaces as an error wrapping
// io.ErrUnexpectedEOF, as a closed connection would.
func (s *Server) Transport(remoteAddr string) http.RoundTripper {
	if remoteAddr == "" {
		remoteAddr = "127.0.0.1:1"
	}
	return &inProcess{srv: s, remoteAddr: remoteAddr}
}

type inProcess struct {
	srv        *Server
	remoteAddr string
}

func (t *inProcess) RoundTrip(req *http.Request) (resp *http.Response, err error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	sr := req.Clone(req.Context())
	sr.RemoteAddr = t.remoteAddr
	sr.RequestURI = req.URL.RequestURI()
	sr.Host = req.Host
	if sr.Host == "" {
		sr.Host = req.URL.Host
	}
	if sr.Body == nil {
		sr.Body = http.NoBody
	}
	if req.URL.Scheme == "https" {
		sr.TLS = &tls.ConnectionState{HandshakeComplete: true, ServerName: req.URL.Hostname()}
	}
	sr.URL.Scheme, sr.URL.Host = "", ""
	rec := httptest.NewRecorder()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				resp, err = nil, fmt.Errorf("sim: %s %s: connection closed without an answer: %w", req.Method, req.URL.Redacted(), io.ErrUnexpectedEOF)
				return
			}
			panic(v)
		}
	}()
	t.srv.ServeHTTP(rec, sr)
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	res := rec.Result()
	res.Request = req
	res.Proto, res.ProtoMajor, res.ProtoMinor = "HTTP/1.1", 1, 1
	if req.Method == http.MethodHead {
		res.Body = http.NoBody
	}
	res.Status = fmt.Sprintf("%d %s", res.StatusCode, http.StatusText(res.StatusCode))
	if n, err := strconv.ParseInt(res.Header.Get("Content-Length"), 10, 64); err == nil && n >= 0 {
		res.ContentLength = n
	}
	return res, nil
}
