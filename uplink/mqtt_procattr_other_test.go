//go:build !linux

package uplink

import "os/exec"

// mqttDieWithTest does nothing where there is no parent-death signal.
func mqttDieWithTest(*exec.Cmd) {}
