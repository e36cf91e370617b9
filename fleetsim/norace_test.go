//go:build !race

package fleetsim_test

const raceEnabled = false
