package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
)

// A handler's context names the task it runs, for a client that orders
// its requests by the task (fetch's scheduler); other contexts name none.
func TestRunningNamesTheTask(t *testing.T) {
	if Running(context.Background()) != nil {
		t.Fatal("Running of a plain context is not nil")
	}
	q := openQueue(t, sqliteDSN(t), withHandlers(map[string]HandlerFunc{"t.who": func(ctx context.Context, task *Task) (json.RawMessage, error) {
		r := Running(ctx)
		if r == nil {
			return nil, Permanent(fmt.Errorf("no running task in the handler's context"))
		}
		return json.Marshal(map[string]int64{"id": r.ID, "priority": int64(r.Priority)})
	}}))
	id := mustSubmit(t, q, "t.who", `{}`, SubmitOptions{Priority: 3})
	startWorker(t, q, WorkOptions{})
	done := mustAwait(t, q, id)
	if want := fmt.Sprintf(`{"id":%d,"priority":3}`, id); done.State != StateCompleted || string(done.Result) != want {
		t.Fatalf("task %s %s, want completed with %s", done.State, done.Result, want)
	}
}
