package uplink_test

// The core's tests run their pools, names and words with every kind
// registered, as a program that imports the kinds does.
import (
	_ "fieldlink/uplink/kinds"
)
