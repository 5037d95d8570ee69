package selector

import "errors"

// ErrUnknownStrategy is returned, wrapped with the valid names, by [New] for a
// strategy name it does not know.
var ErrUnknownStrategy = errors.New("selector: unknown strategy")
