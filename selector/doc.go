// Package selector will hold the strategies that pick an upstream for each
// delivery from per-upstream statistics, without doing any I/O itself.
package selector
