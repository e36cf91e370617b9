package holder

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

func TestSelfRoundTrip(t *testing.T) {
	me := Self()
	if me.PID != os.Getpid() || me.Host == "" {
		t.Fatalf("Self = %+v", me)
	}
	got, ok := Parse(me.String())
	if !ok || got != me {
		t.Fatalf("Parse(%q) = %+v, %v; want %+v", me.String(), got, ok, me)
	}
	if !Local(me.String()) {
		t.Fatal("this process is not local")
	}
	if Gone(me.String()) {
		t.Fatal("this process is gone")
	}
}

func TestParseRefusesOtherForms(t *testing.T) {
	for _, s := range []string{"", "host-123-abcd", "a/b/c", "a/b/0/x", "/b/1/x", "a/b/-3/x"} {
		if _, ok := Parse(s); ok {
			t.Errorf("Parse(%q) accepted", s)
		}
		if Gone(s) {
			t.Errorf("Gone(%q): a holder that cannot be read is never gone", s)
		}
	}
}

// startChild starts cmd and returns its holder, checking that it is not
// gone while it runs.
func startChild(t *testing.T, cmd *exec.Cmd) ID {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	me := Self()
	child := ID{Host: me.Host, Boot: me.Boot, PID: cmd.Process.Pid, Start: startOf(cmd.Process.Pid)}
	if Gone(child.String()) {
		t.Fatal("a running child is gone")
	}
	return child
}

// A process that ended is gone; one still running is not.
func TestGoneAfterExit(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	child := startChild(t, cmd)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if !Gone(child.String()) {
		t.Fatal("an ended child is not gone")
	}
}

// A PID now used by another process (another start), or a holder of an
// earlier boot of this machine, is gone; a holder of another machine is
// never proven gone here.
func TestGoneReusedPIDOtherBootOtherHost(t *testing.T) {
	me := Self()
	if me.Start != "" {
		reused := me
		reused.Start = me.Start + "0"
		if !Gone(reused.String()) {
			t.Error("a PID with another start time is not gone")
		}
	}
	if me.Boot != "" {
		earlier := me
		earlier.Boot = "an-earlier-boot"
		if !Gone(earlier.String()) {
			t.Error("a holder of an earlier boot is not gone")
		}
	}
	other := me
	other.Host = me.Host + "-elsewhere"
	other.PID = 1 << 30
	if Gone(other.String()) {
		t.Error("a holder of another machine was taken for gone")
	}
	if Local(other.String()) {
		t.Error("another machine's holder is local")
	}
}

// A killed process that its parent has not waited for yet (a zombie) is
// gone: it ended, and holds nothing.
func TestGoneWhileAZombie(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestSleepForever$")
	cmd.Env = append(os.Environ(), "HOLDER_TEST_SLEEP=1")
	child := startChild(t, cmd)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	if runtime.GOOS != "linux" {
		return // only Linux's process table tells a zombie
	}
	for deadline := time.Now().Add(10 * time.Second); !Gone(child.String()); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a killed child not yet waited for is not gone")
		}
	}
}

// TestSleepForever is the child of TestGoneWhileAZombie.
func TestSleepForever(t *testing.T) {
	if os.Getenv("HOLDER_TEST_SLEEP") == "" {
		return
	}
	time.Sleep(time.Hour)
}
