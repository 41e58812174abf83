package spawn

import (
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestKillChildren(t *testing.T) {
	t.Parallel()
	p, err := Start(exec.Command("sh", "-c", "sleep 60 & sleep 60 & wait"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, k := range Children(p.PID()) {
			syscall.Kill(k, syscall.SIGKILL)
		}
		p.Kill()
	})
	var kids []int
	for deadline := time.Now().Add(time.Minute); len(kids) < 2 && time.Now().Before(deadline); {
		kids = Children(p.PID())
		time.Sleep(10 * time.Millisecond)
	}
	if len(kids) != 2 || slices.Contains(kids, p.PID()) {
		t.Fatalf("Children(%d) = %v, want sh's two sleeps", p.PID(), kids)
	}
	for _, k := range kids {
		syscall.Kill(k, syscall.SIGKILL)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
}
