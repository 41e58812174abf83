//go:build unix

package spawn_test

import (
	"fmt"
	"os/exec"

	"github.com/sluicehq/sluice/redistest/spawn"
)

func Example() {
	port, err := spawn.FreePort()
	if err != nil {
		panic(err)
	}
	p, err := spawn.Start(exec.Command("sh", "-c", "exit 3"))
	if err != nil {
		panic(err)
	}
	<-p.Done()
	fmt.Println(port >= 10000, p.State().ExitCode())
	// Output: true 3
}
