package headers

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// ErrNotHTTP is returned by ReadRaw when the input is not an HTTP response.
var ErrNotHTTP = errors.New("not an HTTP response")

// Raw is a response as a terminal shows it.
type Raw struct {
	Status int
	Proto  string
	Header http.Header
	Body   []byte
}

// maxRawBody bounds how much body ReadRaw keeps.
const maxRawBody = 64 << 10

// ReadRaw reads a response printed by `curl -i`, `curl -sD -` or `curl -v`
// (lines starting with "< "): a status line such as "HTTP/1.1 403
// Forbidden" or "HTTP/2 403", header lines, a blank line and an optional
// body. Interim responses (1xx, "200 Connection established" of a proxy)
// and the redirects `curl -iL` prints before the final response are
// skipped: the last response is returned. CRLF and LF line ends are both
// accepted, and obsolete folded header lines are joined.
func ReadRaw(r io.Reader) (*Raw, error) {
	data, err := io.ReadAll(io.LimitReader(r, 4<<20))
	if err != nil {
		return nil, err
	}
	data = stripVerbose(data)
	var last *Raw
	rest := data
	for {
		rest = bytes.TrimLeft(rest, " \t\r\n")
		if !bytes.HasPrefix(rest, []byte("HTTP/")) {
			break
		}
		resp, remaining, err := readOne(rest)
		if err != nil {
			if last != nil {
				break
			}
			return nil, err
		}
		last = resp
		rest = remaining
		// Another status line follows when curl printed an interim
		// response, a proxy's CONNECT answer or a redirect it followed.
		trimmed := bytes.TrimLeft(rest, " \t\r\n")
		if !bytes.HasPrefix(trimmed, []byte("HTTP/")) || !looksLikeStatusLine(trimmed) {
			last.Body = rest
			if len(last.Body) > maxRawBody {
				last.Body = last.Body[:maxRawBody]
			}
			break
		}
	}
	if last == nil {
		first := firstLine(data)
		if first == "" {
			return nil, fmt.Errorf("%w: input is empty", ErrNotHTTP)
		}
		return nil, fmt.Errorf("%w: first line %q is not a status line like \"HTTP/1.1 200 OK\"", ErrNotHTTP, first)
	}
	return last, nil
}

// readOne reads a status line and header block; it returns what follows
// the blank line.
func readOne(data []byte) (*Raw, []byte, error) {
	line, rest := cutLine(data)
	proto, code, ok := parseStatusLine(line)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q is not a status line like \"HTTP/1.1 200 OK\"", ErrNotHTTP, truncate(line, 80))
	}
	h := http.Header{}
	var lastKey string
	for len(rest) > 0 {
		line, rest = cutLine(rest)
		if strings.TrimSpace(line) == "" {
			break
		}
		if (line[0] == ' ' || line[0] == '\t') && lastKey != "" {
			vals := h[lastKey]
			vals[len(vals)-1] += " " + strings.TrimSpace(line)
			continue
		}
		k, v, found := strings.Cut(line, ":")
		k = strings.TrimSpace(k)
		if !found || k == "" || strings.ContainsAny(k, " \t") {
			continue // not a header line; ignore it rather than fail
		}
		lastKey = textproto.CanonicalMIMEHeaderKey(k)
		h[lastKey] = append(h[lastKey], strings.TrimSpace(v))
	}
	return &Raw{Status: code, Proto: proto, Header: h}, rest, nil
}

func parseStatusLine(line string) (proto string, code int, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "HTTP/") {
		return "", 0, false
	}
	code, err := strconv.Atoi(fields[1])
	if err != nil || len(fields[1]) != 3 || code < 100 || code > 999 {
		return "", 0, false
	}
	return fields[0], code, true
}

func looksLikeStatusLine(data []byte) bool {
	line, _ := cutLine(data)
	_, _, ok := parseStatusLine(line)
	return ok
}

func cutLine(data []byte) (string, []byte) {
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return strings.TrimRight(string(data), "\r"), nil
	}
	return strings.TrimRight(string(data[:i]), "\r"), data[i+1:]
}

func firstLine(data []byte) string {
	line, _ := cutLine(bytes.TrimLeft(data, " \t\r\n"))
	return truncate(line, 80)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// stripVerbose turns `curl -v` output into `curl -i` output: lines starting
// with "< " are response lines, "> " request lines and "* " notes. Input
// without such lines is returned unchanged.
func stripVerbose(data []byte) []byte {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if bytes.HasPrefix(trimmed, []byte("> HTTP/")) {
		// Documentation pages (GitHub's among them) quote responses
		// with "> " in front of every line.
		return quoted(data)
	}
	if !bytes.Contains(data, []byte("< HTTP/")) {
		return data
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	inBody := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "< "):
			out.WriteString(line[2:])
			out.WriteByte('\n')
		case line == "<":
			out.WriteByte('\n')
			inBody = true
		case strings.HasPrefix(line, "> "), line == ">", strings.HasPrefix(line, "* "), strings.HasPrefix(line, "{ "), strings.HasPrefix(line, "} "):
		default:
			if inBody {
				out.WriteString(line)
				out.WriteByte('\n')
			}
		}
	}
	return out.Bytes()
}

// quoted removes a leading "> " (or ">") from every line.
func quoted(data []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		switch {
		case bytes.HasPrefix(line, []byte("> ")):
			line = line[2:]
		case bytes.HasPrefix(line, []byte(">")):
			line = line[1:]
		}
		out.Write(line)
	}
	return out.Bytes()
}
