package poll

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Hours is a daily span of wall-clock time, such as business hours 9-18 or
// quiet hours 22-7, read in the Policy's time zone. From is included, To is
// not; a span whose To comes before its From wraps past midnight (22-7 is
// 22:00 to 07:00 the next morning). The zero value (From == To) is an empty
// span: no time of day is in it. 0-24 is the whole day.
type Hours struct {
	// From and To are minutes since midnight, 0 to 1440.
	From, To int
}

// ParseHours reads a span written H-H or HH:MM-HH:MM ("9-18",
// "08:30-17:45", "22-7"); "off", "none" and "" give the empty span.
func ParseHours(s string) (Hours, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "off", "none":
		return Hours{}, nil
	}
	from, to, ok := strings.Cut(s, "-")
	if !ok {
		return Hours{}, fmt.Errorf("hours %q: want FROM-TO such as 9-18, 22-7 or 08:30-17:45, or off", s)
	}
	f, err := parseClock(from)
	if err != nil {
		return Hours{}, fmt.Errorf("hours %q: %v", s, err)
	}
	t, err := parseClock(to)
	if err != nil {
		return Hours{}, fmt.Errorf("hours %q: %v", s, err)
	}
	if f == t {
		return Hours{}, fmt.Errorf("hours %q: the span is empty; write off for none or 0-24 for the whole day", s)
	}
	if f == 24*60 {
		return Hours{}, fmt.Errorf("hours %q: a span starts at 0 to 23:59, not 24", s)
	}
	return Hours{From: f, To: t}, nil
}

// parseClock reads "9", "09", "9:30" or "24" as minutes since midnight.
func parseClock(s string) (int, error) {
	s = strings.TrimSpace(s)
	hh, mm, hasMin := strings.Cut(s, ":")
	h, err := strconv.Atoi(hh)
	if err != nil || h < 0 || h > 24 {
		return 0, fmt.Errorf("%q is not an hour from 0 to 24", s)
	}
	m := 0
	if hasMin {
		m, err = strconv.Atoi(mm)
		if err != nil || m < 0 || m > 59 || len(mm) != 2 {
			return 0, fmt.Errorf("%q: minutes must be two digits from 00 to 59", s)
		}
	}
	if h == 24 && m != 0 {
		return 0, fmt.Errorf("%q is past the end of the day", s)
	}
	return h*60 + m, nil
}

// String writes the span as ParseHours reads it.
func (h Hours) String() string {
	if h.Empty() {
		return "off"
	}
	return clock(h.From) + "-" + clock(h.To)
}

func clock(m int) string {
	if m%60 == 0 {
		return strconv.Itoa(m / 60)
	}
	return fmt.Sprintf("%d:%02d", m/60, m%60)
}

// Empty reports whether no time of day is in the span.
func (h Hours) Empty() bool { return h.From == h.To }

// Contains reports whether the wall-clock time of t (in t's location) is
// in the span.
func (h Hours) Contains(t time.Time) bool {
	if h.Empty() {
		return false
	}
	m := t.Hour()*60 + t.Minute()
	if h.From < h.To {
		return m >= h.From && m < h.To
	}
	return m >= h.From || m < h.To
}

// wraps reports whether the span runs past midnight, so that its early
// part belongs to the day before.
func (h Hours) wraps() bool { return !h.Empty() && h.To < h.From }

// Weekdays is a set of days of the week, bit d for time.Weekday d.
type Weekdays uint8

// Weekday sets.
const (
	MondayToFriday Weekdays = 1<<time.Monday | 1<<time.Tuesday | 1<<time.Wednesday | 1<<time.Thursday | 1<<time.Friday
	EveryDay       Weekdays = 1<<7 - 1
)

var dayNames = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// ParseWeekdays reads a set of days: names or three-letter abbreviations,
// ranges and lists ("mon-fri", "mon,wed,fri", "sat-sun", "fri-mon"), "all"
// or "none".
func ParseWeekdays(s string) (Weekdays, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case "all", "every", "daily":
		return EveryDay, nil
	case "none", "off", "":
		return 0, nil
	}
	var w Weekdays
	for _, part := range strings.Split(s, ",") {
		from, to, isRange := strings.Cut(strings.TrimSpace(part), "-")
		f, err := parseDay(from)
		if err != nil {
			return 0, fmt.Errorf("days %q: %v", s, err)
		}
		t := f
		if isRange {
			if t, err = parseDay(to); err != nil {
				return 0, fmt.Errorf("days %q: %v", s, err)
			}
		}
		for d := f; ; d = (d + 1) % 7 {
			w |= 1 << d
			if d == t {
				break
			}
		}
	}
	return w, nil
}

func parseDay(s string) (time.Weekday, error) {
	s = strings.TrimSpace(s)
	if len(s) >= 3 {
		for i, n := range dayNames {
			if strings.HasPrefix(s, n) && strings.HasPrefix(strings.ToLower(time.Weekday(i).String()), s) {
				return time.Weekday(i), nil
			}
		}
	}
	return 0, fmt.Errorf("%q is not a day of the week (mon, tue, wed, thu, fri, sat, sun)", s)
}

// Has reports whether d is in the set.
func (w Weekdays) Has(d time.Weekday) bool { return w&(1<<d) != 0 }

// String lists the days, "mon-fri" style for the common sets.
func (w Weekdays) String() string {
	switch w {
	case 0:
		return "none"
	case EveryDay:
		return "all"
	case MondayToFriday:
		return "mon-fri"
	}
	var names []string
	for d := time.Sunday; d <= time.Saturday; d++ {
		if w.Has(d) {
			names = append(names, dayNames[d])
		}
	}
	return strings.Join(names, ",")
}
