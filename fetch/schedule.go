package fetch

import "github.com/ratekeeper/ratekeeper/taskbatch"

// adjust moves the tasks that this process runs but that wait in the
// scheduler (package taskbatch) from Running to Ready (their quota can
// go, a sender is busy) or Sleeping (they wait for quota, the first until
// NextAt).
func adjust(s *taskbatch.Scheduler, snap *Snapshot) {
	p := s.Progress()
	waiting := 0
	for _, w := range p.Waiting {
		waiting += w.Requests
		if !w.OnAnswer && (snap.NextAt.IsZero() || w.Until.Before(snap.NextAt)) {
			snap.NextAt = w.Until
		}
	}
	held := min(waiting+p.Ready, max(snap.Running-snap.Elsewhere, 0))
	snap.Running -= held
	snap.Ready += min(p.Ready, held)
	snap.Sleeping += held - min(p.Ready, held)
}
