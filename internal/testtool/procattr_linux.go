package testtool

import (
	"os/exec"
	"syscall"
)

// dieWithTest has the child killed if the test binary dies (a panic or a
// -timeout), where no Cleanup runs.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
