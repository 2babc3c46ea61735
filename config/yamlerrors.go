// What the YAML decoder says of a file it cannot read, turned into one
// line with the line number, the key and the fix: durations written
// without a Go unit, tabs in the indentation, and lines indented to no
// level of the lines above them (which the decoder reports lines away from
// where they are).

package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// yamlMessage turns a yaml.v3 error decoding data into one line naming the
// line, the key and what to write instead, when it can tell; otherwise the
// decoder's own words.
func yamlMessage(data []byte, err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		durations := durationProblems(data)
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			if line, ok := durationError(m); ok && len(durations[line]) > 0 {
				msgs[i], durations[line] = durations[line][0], durations[line][1:]
				continue
			}
			msgs[i] = unknownField.ReplaceAllString(m, `unknown key "$1"`)
		}
		return strings.Join(msgs, "; ")
	}
	if msg := layoutProblem(data); msg != "" {
		return msg
	}
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

var unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)

// durationFailure is how yaml.v3 says a value is no time.Duration.
var durationFailure = regexp.MustCompile("^line (\\d+): cannot unmarshal !!\\w+ `.*` into time\\.Duration$")

// durationError reports whether m says a value is no duration, and its
// line.
func durationError(m string) (int, bool) {
	sub := durationFailure.FindStringSubmatch(m)
	if sub == nil {
		return 0, false
	}
	line, err := strconv.Atoi(sub[1])
	return line, err == nil
}

var durationType = reflect.TypeFor[time.Duration]()

// durationProblems finds the values of duration keys that are no Go
// duration, by line: each message names the line, the key path and what
// to write.
func durationProblems(data []byte) map[int][]string {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return nil
	}
	found := map[int][]string{}
	walkDurations(&doc, reflect.TypeFor[Config](), "", found)
	return found
}

// walkDurations walks n, the YAML of a value of type t at path, and adds
// to found what is wrong with each duration in it.
func walkDurations(n *yaml.Node, t reflect.Type, path string, found map[int][]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml.DocumentNode:
		for _, c := range n.Content {
			walkDurations(c, t, path, found)
		}
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			return
		}
		if _, err := time.ParseDuration(n.Value); err == nil && n.Tag == "!!str" {
			return
		}
		found[n.Line] = append(found[n.Line], fmt.Sprintf("line %d: %s: %s", n.Line, path, durationFix(n)))
	case t == reflect.TypeFor[yaml.Node]():
		// A provider's options: its adapter reads them.
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if ft, ok := fieldType(t, n.Content[i].Value); ok {
				walkDurations(n.Content[i+1], ft, joinKey(path, n.Content[i].Value), found)
			}
		}
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && n.Kind == yaml.SequenceNode:
		for i, c := range n.Content {
			walkDurations(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), found)
		}
	}
}

// fieldType is the type of the field of struct t that the YAML key names
// (its yaml tag, inline structs included).
func fieldType(t reflect.Type, key string) (reflect.Type, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" {
			name = strings.ToLower(f.Name) // yaml.v3's default key
		}
		switch {
		case name == "-" || !f.IsExported():
		case strings.Contains(opts, "inline"):
			if ft, ok := fieldType(f.Type, key); ok {
				return ft, true
			}
		case name == key:
			return f.Type, true
		}
	}
	return nil, false
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// unitWords are units people write that Go durations spell otherwise, and
// how many of Go's units each is.
var unitWords = map[string]time.Duration{
	"ns": time.Nanosecond, "us": time.Microsecond, "µs": time.Microsecond, "ms": time.Millisecond,
	"msec": time.Millisecond, "msecs": time.Millisecond, "millisecond": time.Millisecond, "milliseconds": time.Millisecond,
	"s": time.Second, "sec": time.Second, "secs": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "mins": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hrs": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	"w": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
}

// daysOrWeeks is a number of days or weeks, maybe followed by a Go
// duration: "3d", "1d12h", "2w".
var daysOrWeeks = regexp.MustCompile(`^(\d+(?:\.\d+)?)([dw])(.*)$`)

// numberWithUnit is a number and a unit word, e.g. "3d", "10 sec".
var numberWithUnit = regexp.MustCompile(`^(\d+(?:\.\d+)?)\s*([a-zA-Zµ]+)$`)

// durationFix says what is wrong with the scalar n as a duration and what
// to write instead, e.g. `"2" has no unit; write "2s"`.
func durationFix(n *yaml.Node) string {
	v := strings.TrimSpace(n.Value)
	if n.Tag == "!!int" || n.Tag == "!!float" {
		return fmt.Sprintf("%q has no unit; write %q", n.Value, v+"s")
	}
	// Days or weeks, alone or followed by a Go duration: "3d", "1d12h".
	if m := daysOrWeeks.FindStringSubmatch(v); m != nil {
		rest := time.Duration(0)
		ok := true
		if m[3] != "" {
			var err error
			rest, err = time.ParseDuration(m[3])
			ok = err == nil
		}
		if count, err := strconv.ParseFloat(m[1], 64); ok && err == nil {
			unit, name := 24*time.Hour, "days"
			if m[2] == "w" {
				unit, name = 7*24*time.Hour, "weeks"
			}
			return fmt.Sprintf("%q: %s are not a duration unit (ns, us, ms, s, m, h); write %q", n.Value, name,
				durationText(time.Duration(count*float64(unit))+rest))
		}
	}
	if m := numberWithUnit.FindStringSubmatch(v); m != nil {
		if unit, ok := unitWords[strings.ToLower(m[2])]; ok {
			if count, err := strconv.ParseFloat(m[1], 64); err == nil {
				return fmt.Sprintf("%q is not a duration; write %q", n.Value, durationText(time.Duration(count*float64(unit))))
			}
		}
	}
	return fmt.Sprintf("%q is not a duration: write a number with a unit (ns, us, ms, s, m, h), such as \"30s\", \"5m\" or \"72h\"", n.Value)
}

// durationText writes d as a Go duration without its zero tail: "72h",
// "1h30m", "1.5s".
func durationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// layoutLine is one line of YAML that holds a key or a list item, as
// layoutProblem reads it.
type layoutLine struct {
	no     int    // from 1
	indent int    // spaces before its first token
	dashes []int  // the columns of its list item dashes, outermost first
	key    string // the key it sets, "" for a bare item
	col    int    // the column of the key, or of what follows the last dash
	opens  bool   // it ends with "key:" (a block follows) or "-"
}

// level is one open block: its column, and the latest key set in it (a
// mapping) or the number of its latest item (a list).
type level struct {
	col     int
	list    bool
	key     string
	keyLine int
	item    int
}

// layoutProblem finds the first line whose indentation YAML cannot read: a
// tab in it, or a key indented to no level of the blocks above it. It
// names the line, the key path the line would have and the fix, and only
// when making that fix lets the decoder get past the line; else "".
func layoutProblem(data []byte) string {
	text := strings.Split(string(data), "\n")
	var (
		stack      []level
		prev       *layoutLine // the previous line with a key or an item
		scalarCol  = -1        // inside a block scalar of a key at this column
		flowDepth  int         // inside a flow collection spanning lines
		childLevel bool        // prev opened a block
	)
	for i, raw := range text {
		line := strings.TrimRight(raw, "\r")
		trimmed := strings.TrimLeft(line, " \t")
		lead := line[:len(line)-len(trimmed)]
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if scalarCol >= 0 {
			if len(lead) > scalarCol {
				continue
			}
			scalarCol = -1
		}
		if flowDepth > 0 {
			flowDepth += bracketDepth(trimmed)
			continue
		}
		if trimmed == "---" || trimmed == "..." || strings.HasPrefix(trimmed, "%") {
			stack, prev, childLevel = nil, nil, false
			continue
		}
		l := readLayoutLine(i+1, lead, trimmed)
		if l.key == "" && len(l.dashes) == 0 && !strings.Contains(lead, "\t") {
			continue // the rest of a value that spans lines
		}

		if strings.Contains(lead, "\t") {
			// Where the line belongs: under the line above when that one
			// opened a block, else beside it.
			want := 0
			if prev != nil {
				want = prev.col
				if childLevel {
					want = prev.col + 2
				}
			}
			path := pathOf(stack, l.key, want, childLevel)
			fixed := fixIndent(text, i, strings.Repeat(" ", want)+trimmed)
			if !parsesPast(fixed, i+1) {
				return ""
			}
			return fmt.Sprintf("line %d: %s: indented with a tab; YAML indents with spaces only: replace the tab with %s",
				l.no, keyOrItem(path), spaces(want))
		}

		first := l.indent
		switch {
		case childLevel && (first > prev.col || (first == prev.col && len(l.dashes) > 0 && prev.key != "")):
			// The block prev opened.
		default:
			// Back to an open level: pop the deeper ones.
			before := append([]level(nil), stack...)
			for len(stack) > 0 && (stack[len(stack)-1].col > first ||
				(stack[len(stack)-1].col == first && stack[len(stack)-1].list && len(l.dashes) == 0)) {
				stack = stack[:len(stack)-1]
			}
			if len(stack) > 0 && stack[len(stack)-1].col != first || len(stack) == 0 && first != 0 {
				return misindented(text, before, l, i)
			}
		}
		stack = push(stack, l)
		prev, childLevel = &l, l.opens
		if l.key != "" {
			rest := strings.TrimSpace(afterKey(trimmed))
			switch {
			case strings.HasPrefix(rest, "|") || strings.HasPrefix(rest, ">"):
				scalarCol = l.indent
				if len(l.dashes) > 0 {
					scalarCol = l.col
				}
			case strings.HasPrefix(rest, "[") || strings.HasPrefix(rest, "{"):
				flowDepth = bracketDepth(rest)
			}
		}
	}
	return ""
}

// readLayoutLine reads a line after its indentation lead: its list item
// dashes, its key and whether it opens a block.
func readLayoutLine(no int, lead, trimmed string) layoutLine {
	l := layoutLine{no: no, indent: len(lead)}
	col, rest := len(lead), trimmed
	for rest == "-" || strings.HasPrefix(rest, "- ") {
		l.dashes = append(l.dashes, col)
		after := strings.TrimLeft(rest[1:], " ")
		col += len(rest) - len(after)
		rest = after
	}
	l.col = col
	if m := keyPattern.FindStringSubmatch(rest); m != nil {
		l.key = strings.Trim(m[1], `"'`)
		after := strings.TrimSpace(rest[len(m[0]):])
		l.opens = after == "" || strings.HasPrefix(after, "#")
	} else {
		l.opens = rest == ""
	}
	return l
}

// keyPattern is a line's key and its colon.
var keyPattern = regexp.MustCompile(`^("[^"]*"|'[^']*'|[^\s"'#\[\]{},:&*!|>%@` + "`" + `-][^:#]*?|-[^\s:][^:#]*?)\s*:(?:\s|$)`)

// afterKey is what follows the key's colon on a line.
func afterKey(trimmed string) string {
	for strings.HasPrefix(trimmed, "- ") {
		trimmed = strings.TrimLeft(trimmed[2:], " ")
	}
	if m := keyPattern.FindStringIndex(trimmed); m != nil {
		return trimmed[m[1]:]
	}
	return ""
}

// push records l in the open levels: its list items, then its key's
// mapping.
func push(stack []level, l layoutLine) []level {
	for _, d := range l.dashes {
		if n := len(stack); n > 0 && stack[n-1].col == d && stack[n-1].list {
			stack[n-1].item++
		} else {
			stack = append(stack, level{col: d, list: true})
		}
	}
	if l.key == "" {
		return stack
	}
	if n := len(stack); n > 0 && stack[n-1].col == l.col && !stack[n-1].list {
		stack[n-1].key, stack[n-1].keyLine = l.key, l.no
		return stack
	}
	return append(stack, level{col: l.col, key: l.key, keyLine: l.no})
}

// pathOf is the key path of key set at column col, as a child of the
// innermost level (child) or beside the levels at col.
func pathOf(stack []level, key string, col int, child bool) string {
	var parts []string
	for _, lv := range stack {
		if lv.col > col || (lv.col == col && !child && !lv.list) {
			break
		}
		if lv.list {
			parts = append(parts, fmt.Sprintf("[%d]", lv.item))
		} else if lv.key != "" {
			parts = append(parts, lv.key)
		}
	}
	if key != "" {
		parts = append(parts, key)
	}
	path := ""
	for _, p := range parts {
		if strings.HasPrefix(p, "[") || path == "" {
			path += p
		} else {
			path += "." + p
		}
	}
	return path
}

func keyOrItem(path string) string {
	if path == "" {
		return "a list item"
	}
	return path
}

// misindented says how line l (text[i]) is indented to no level open
// above it (open: the levels before l), and which level to indent it to:
// the deepest whose block has l's key (by the configuration's keys), else
// the deepest. "" when moving it there does not let the decoder past it.
func misindented(text []string, open []level, l layoutLine, i int) string {
	var candidates []level // deepest first, one per column
	for j := len(open) - 1; j >= 0; j-- {
		if open[j].list || open[j].key == "" || (len(candidates) > 0 && candidates[len(candidates)-1].col <= open[j].col) {
			continue
		}
		candidates = append(candidates, open[j])
	}
	if len(candidates) == 0 {
		return ""
	}
	pick := candidates[0]
	for _, c := range candidates {
		if knownKey(pathOf(open, "", c.col, false), l.key) {
			pick = c
			break
		}
	}
	trimmed := strings.TrimLeft(text[i], " ")
	if !parsesPast(fixIndent(text, i, strings.Repeat(" ", pick.col)+trimmed), i+1) {
		return ""
	}
	return fmt.Sprintf("line %d: %s: indented %s, which lines it up with no block above it (%s on line %d is at %d); indent it %s, like %s",
		l.no, keyOrItem(pathOf(open, l.key, pick.col, false)), spaces(l.indent), pick.key, pick.keyLine, pick.col, spaces(pick.col), pick.key)
}

// spaces is "1 space", "3 spaces".
func spaces(n int) string {
	if n == 1 {
		return "1 space"
	}
	return strconv.Itoa(n) + " spaces"
}

// knownKey reports whether the configuration has key in the block at path
// ("" for the top level).
func knownKey(path, key string) bool {
	t := reflect.TypeFor[Config]()
	for _, part := range splitPath(path) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if strings.HasPrefix(part, "[") {
			if t.Kind() != reflect.Slice {
				return false
			}
			t = t.Elem()
			continue
		}
		if t.Kind() != reflect.Struct {
			return false
		}
		ft, ok := fieldType(t, part)
		if !ok {
			return false
		}
		t = ft
	}
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	_, ok := fieldType(t, key)
	return ok
}

// splitPath splits "auth.tokens[0]" into "auth", "tokens", "[0]".
func splitPath(path string) []string {
	var parts []string
	for _, p := range strings.Split(path, ".") {
		for p != "" {
			k := strings.Index(p[1:], "[")
			if k < 0 {
				parts = append(parts, p)
				break
			}
			parts = append(parts, p[:k+1])
			p = p[k+1:]
		}
	}
	return parts
}

// fixIndent is text with line i (from 0) replaced, joined again.
func fixIndent(text []string, i int, line string) []byte {
	fixed := append([]string(nil), text...)
	fixed[i] = line
	return []byte(strings.Join(fixed, "\n"))
}

// parsesPast reports whether the decoder reads data past line no: without
// error, or with an error on a later line.
func parsesPast(data []byte, no int) bool {
	var n yaml.Node
	err := yaml.Unmarshal(data, &n)
	if err == nil {
		return true
	}
	m := errorLine.FindStringSubmatch(err.Error())
	if m == nil {
		return false
	}
	at, _ := strconv.Atoi(m[1])
	return at > no
}

// errorLine is the line number in a decoder's error.
var errorLine = regexp.MustCompile(`line (\d+):`)

// bracketDepth is how many flow collections s opens and leaves open,
// brackets in quotes aside.
func bracketDepth(s string) int {
	depth := 0
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '#':
			return depth
		case r == '[' || r == '{':
			depth++
		case r == ']' || r == '}':
			depth--
		}
	}
	return depth
}
