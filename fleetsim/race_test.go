//go:build race

package fleetsim_test

// raceEnabled: the README's go test -race ./... runs fewer schedules;
// .ci/run runs the bulk without -race.
const raceEnabled = true
