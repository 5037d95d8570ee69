//go:build !field

package main

// fieldBuild is false in the full build, which has the demo, the lab, the
// emulator and the Delphi step; see field.go.
const fieldBuild = false
