// Package jsonkind names the kind of a JSON value, for errors that say
// what was sent instead of what was wanted.
package jsonkind

// Of names the kind of the JSON value raw starts with: "a string", "an
// object", "an array", "a boolean", "null", "a number", or "nothing".
func Of(raw []byte) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
