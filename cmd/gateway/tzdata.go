//go:build !field

package main

// The development binary carries the time zone database, so that the demo
// and a checkout run anywhere. The field binary reads the system's
// (/usr/share/zoneinfo: the package depends on tzdata; ZONEINFO may name a
// zoneinfo.zip elsewhere): the database costs 400 KB, which the ARM
// binaries' 10 MiB target cannot spare beside the features.
import _ "time/tzdata"
