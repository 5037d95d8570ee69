package uplink

import (
	"os/exec"
	"syscall"
)

// mqttDieWithTest has the broker killed if the test binary dies (a panic
// or a -timeout), where no Cleanup runs.
func mqttDieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
