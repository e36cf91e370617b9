package provider

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseReserve reads a reserve as the --reserve flag, the config file's
// reserve key and the library's options give it: a count of requests kept
// back in every bucket ("100"), or a percentage of each bucket's own limit
// ("10%", at least 0 and below 100). It returns one of count and percent;
// "" and "0" keep nothing back.
func ParseReserve(s string) (count int, percent float64, err error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, 0, nil
	}
	if num, ok := strings.CutSuffix(t, "%"); ok {
		pct, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		switch {
		case err != nil || math.IsNaN(pct) || math.IsInf(pct, 0):
			return 0, 0, fmt.Errorf("reserve %q: want a percentage of each bucket's limit such as \"10%%\"", s)
		case pct < 0 || pct >= 100:
			return 0, 0, fmt.Errorf("reserve %q: want a percentage from 0%% up to (not including) 100%%: keeping a whole bucket back leaves nothing to send", s)
		}
		return 0, pct, nil
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 {
		return 0, 0, fmt.Errorf("reserve %q: want a count of requests kept back in every bucket, such as 100, or a percentage of each bucket's limit, such as \"10%%\"", s)
	}
	return n, 0, nil
}
