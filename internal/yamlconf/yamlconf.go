// Package yamlconf decodes YAML files into Go structs strictly, and reports
// every problem with the file, line, column and field path, so that a field
// technician editing a site file over SSH can find the mistake at once.
//
// Rules, applied to every struct reached:
//   - a key with no matching `yaml:"name"` field is an error that lists the
//     valid keys;
//   - a value of the wrong type is an error naming the expected type;
//   - a field tagged `yaml:"name,required"` that is absent is an error;
//   - a duplicate key is an error;
//   - types implementing [encoding.TextUnmarshaler] decode from a scalar, and
//     their error message is reported at the value's position;
//   - [time.Duration] decodes from strings such as "500ms" or "5s".
//
// Decoding goes on after an error, so one run reports all of them. Semantic
// checks after decoding use [Doc.Errorf] with the field path, which maps back
// to the line where that field was written.
package yamlconf

import (
	"cmp"
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Error is one problem in one file, at one field.
type Error struct {
	File  string
	Line  int // 1-based; 0 when unknown
	Col   int
	Field string // path such as buses[0].devices[1].slave; empty for the whole file
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Col)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a file, in file order.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap lets errors.As find a single *Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

type pos struct{ line, col int }

// Doc remembers where each field of a decoded file was written, and collects
// errors against those positions.
type Doc struct {
	File   string
	pos    map[string]pos
	errs   Errors
	broken bool // the file is not YAML, or empty: nothing was decoded
	// failed holds the fields whose value could not be decoded: a check
	// of their (zero) value would only repeat the problem.
	failed map[string]bool
}

// Broken reports whether the file could not be parsed at all, so that
// checks of its content would only add noise.
func (d *Doc) Broken() bool { return d.broken }

// Decode parses data (read from file) strictly into v, a pointer to a struct.
// The returned Doc is never nil, so callers can go on validating and report
// every error at once; the error is Errors when anything was wrong.
func Decode(file string, data []byte, v any) (*Doc, error) {
	d := &Doc{File: file, pos: map[string]pos{}, failed: map[string]bool{}}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		d.errs = append(d.errs, syntaxError(file, err))
		d.broken = true
		return d, d.Err()
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic("yamlconf: Decode needs a non-nil pointer")
	}
	if len(root.Content) == 0 {
		d.errs = append(d.errs, &Error{File: file, Msg: "file is empty (expected key: value lines)"})
		d.broken = true
		return d, d.Err()
	}
	d.decode(root.Content[0], rv.Elem(), "")
	return d, d.Err()
}

// syntaxError turns yaml's "yaml: line N: msg" into a positioned Error.
func syntaxError(file string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &Error{File: file, Msg: "invalid YAML: " + msg}
	if strings.HasPrefix(msg, "line ") {
		rest := msg[len("line "):]
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, convErr := strconv.Atoi(rest[:i]); convErr == nil {
				e.Line, e.Col = n, 1
				e.Msg = "invalid YAML:" + rest[i+1:]
			}
		}
	}
	return e
}

// Err returns the errors collected so far, or nil.
func (d *Doc) Err() error {
	if len(d.errs) == 0 {
		return nil
	}
	sort.SliceStable(d.errs, func(i, j int) bool {
		a, b := d.errs[i], d.errs[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return d.errs
}

// Has reports whether field was written in the file.
func (d *Doc) Has(field string) bool {
	_, ok := d.pos[field]
	return ok
}

// Line returns the line and column where field was written, or where its
// nearest written parent was (0, 0 when none).
func (d *Doc) Line(field string) (line, col int) {
	for f := field; ; {
		if p, ok := d.pos[f]; ok {
			return p.line, p.col
		}
		i := strings.LastIndexAny(f, ".[")
		if i <= 0 {
			if p, ok := d.pos[""]; ok {
				return p.line, p.col
			}
			return 0, 0
		}
		f = f[:i]
	}
}

// Errorf records an error against field, positioned where it was written.
// It records nothing when the field's value could not be decoded: that
// error is already reported, and a check of the zero value left in its
// place would only add noise.
func (d *Doc) Errorf(field, format string, args ...any) {
	if d.failed[field] {
		return
	}
	line, col := d.Line(field)
	d.errs = append(d.errs, &Error{File: d.File, Line: line, Col: col, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (d *Doc) errAt(n *yaml.Node, field, format string, args ...any) {
	if d.failed != nil {
		d.failed[field] = true
	}
	d.errs = append(d.errs, &Error{File: d.File, Line: n.Line, Col: n.Column, Field: field, Msg: fmt.Sprintf(format, args...)})
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	textType     = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *Doc) decode(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	d.pos[path] = pos{n.Line, n.Column}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" && v.Kind() != reflect.String {
		return // "key:" with nothing: leave the zero value
	}
	if v.CanAddr() && v.Addr().Type().Implements(textType) && v.Kind() != reflect.Pointer {
		if n.Kind != yaml.ScalarNode {
			d.errAt(n, path, "expected a single value, got %s", kindName(n))
			return
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
			d.errAt(n, path, "%v", err)
		}
		return
	}
	if v.Type() == durationType {
		if n.Kind != yaml.ScalarNode {
			d.errAt(n, path, "expected a duration such as 500ms or 5s, got %s", kindName(n))
			return
		}
		dur, err := time.ParseDuration(n.Value)
		if err != nil {
			d.errAt(n, path, "expected a duration such as 500ms or 5s, got %q", n.Value)
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errAt(n, path, "expected a list, got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.decode(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode || v.Type().Key().Kind() != reflect.String {
			d.errAt(n, path, "expected a mapping of names to values, got %s", kindName(n))
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if first, dup := seen[k.Value]; dup {
				d.errAt(k, join(path, k.Value), "duplicate key %q (a key may appear once; the first is on line %d)", k.Value, first)
				continue
			}
			seen[k.Value] = k.Line
			e := reflect.New(v.Type().Elem()).Elem()
			d.decode(val, e, join(path, k.Value))
			v.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), e)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.errAt(n, path, "expected a string, got %s", kindName(n))
			return
		}
		if n.Tag == "!!null" {
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			d.errAt(n, path, "expected true or false, got %s", describe(n))
			return
		}
		v.SetBool(n.Value == "true" || n.Value == "True" || n.Value == "TRUE")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, err := strconv.ParseInt(n.Value, 0, 64)
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil {
			d.errAt(n, path, "expected a whole number, got %s", describe(n))
			return
		}
		if v.OverflowInt(i) {
			bits := v.Type().Bits()
			d.errAt(n, path, "%d is out of range for this field (valid: %d..%d)", i, int64(-1)<<(bits-1), int64(1)<<(bits-1)-1)
			return
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u, err := strconv.ParseUint(n.Value, 0, 64)
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil {
			d.errAt(n, path, "expected a whole number ≥ 0, got %s", describe(n))
			return
		}
		if v.OverflowUint(u) {
			d.errAt(n, path, "%d is out of range for this field (valid: 0..%d)", u, uint64(1)<<v.Type().Bits()-1)
			return
		}
		v.SetUint(u)
	case reflect.Float32, reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!float" && n.Tag != "!!int") {
			d.errAt(n, path, "expected a number, got %s", describe(n))
			return
		}
		var f float64
		var err error
		if n.Tag == "!!int" {
			var i int64
			i, err = strconv.ParseInt(n.Value, 0, 64)
			f = float64(i)
		} else {
			var x any
			err = n.Decode(&x)
			f, _ = x.(float64)
		}
		if err != nil || math.IsNaN(f) {
			d.errAt(n, path, "expected a number, got %s", describe(n))
			return
		}
		v.SetFloat(f)
	case reflect.Interface:
		var x any
		if err := n.Decode(&x); err != nil {
			d.errAt(n, path, "%v", err)
			return
		}
		if x != nil {
			v.Set(reflect.ValueOf(x))
		}
	default:
		panic(fmt.Sprintf("yamlconf: unsupported field type %s at %s", v.Type(), path))
	}
}

type fieldInfo struct {
	index    []int
	required bool
}

func structFields(t reflect.Type) (map[string]fieldInfo, []string) {
	fields := map[string]fieldInfo{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = fieldInfo{index: f.Index, required: strings.Contains(","+opts+",", ",required,")}
		names = append(names, name)
	}
	return fields, names
}

func (d *Doc) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errAt(n, path, "expected a mapping (key: value lines), got %s", kindName(n))
		return
	}
	fields, names := structFields(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		fp := join(path, k.Value)
		if k.Kind != yaml.ScalarNode {
			d.errAt(k, path, "expected a key name, got %s", kindName(k))
			continue
		}
		if k.Value == "<<" {
			d.errAt(k, path, "merge keys (<<) are not supported; write the keys out")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errAt(k, fp, "duplicate key %q (a key may appear once; the first is on line %d)", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		fi, ok := fields[k.Value]
		if !ok {
			d.errAt(k, fp, "unknown field %q%s (valid: %s)", k.Value, DidYouMean(k.Value, names), strings.Join(names, ", "))
			continue
		}
		d.decode(val, v.FieldByIndex(fi.index), fp)
	}
	for _, name := range names {
		if _, ok := seen[name]; fields[name].required && !ok {
			d.errAt(n, join(path, name), "missing required field %q", name)
		}
	}
}

// DidYouMean returns ` (did you mean "x"?)` when one of names is a near
// miss of key (at most two edits away), and "" otherwise.
func DidYouMean(key string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if dd := distance(strings.ToLower(key), strings.ToLower(n)); dd < bestD {
			best, bestD = n, dd
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// Nearest is at most n of names, nearest to key first (by edit distance,
// then by name): a message names a few, not every one there is.
func Nearest(key string, names []string, n int) []string {
	type scored struct {
		name string
		d    int
	}
	all := make([]scored, len(names))
	for i, name := range names {
		all[i] = scored{name, distance(strings.ToLower(key), strings.ToLower(name))}
	}
	slices.SortStableFunc(all, func(a, b scored) int { return cmp.Or(cmp.Compare(a.d, b.d), strings.Compare(a.name, b.name)) })
	out := make([]string, 0, min(n, len(all)))
	for _, s := range all[:min(n, len(all))] {
		out = append(out, s.name)
	}
	return out
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return describe(n)
	}
	return "something else"
}

func describe(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return kindName(n)
	}
	return strconv.Quote(n.Value)
}

// IsErrors reports whether err holds positioned errors, and returns them.
func IsErrors(err error) (Errors, bool) {
	var es Errors
	if errors.As(err, &es) {
		return es, true
	}
	return nil, false
}
