//go:build !field

package main

// fieldBuild is false in the full build, which has the demo and the lab;
// see field.go.
const fieldBuild = false
