package selector

import "errors"

// ErrUnknownStrategy is returned, wrapped with the valid names, by [New] for a
// strategy name it does not know.
var ErrUnknownStrategy = errors.New("selector: unknown strategy")

// ErrFull is returned, wrapped with the name, by [Table.Add] when all
// [MaxUpstreams] upstreams are live.
var ErrFull = errors.New("selector: table full")
