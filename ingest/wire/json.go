// Package wire holds what every webhook adapter needs to read a provider's
// body strictly: one JSON object of valid UTF-8, no member named twice, no
// near-miss spelling of a modeled member, bounded nesting. The rules of the
// values themselves (text, decimals, limits) are the domain's, in package
// fulfillment, which RecordEvent applies again.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of a body (payer metadata included).
const MaxDepth = 64

// Decode reads body into v, a pointer to the struct that models the
// provider's payload (its `json` tags name the members). Beyond what
// encoding/json checks, it insists on exactly one JSON object of valid
// UTF-8, nested at most MaxDepth levels, with no member named twice (a
// parser could take either value) and no member whose name matches a
// modeled one only case-insensitively (encoding/json would silently take
// it), at any modeled level. Unknown members are allowed: providers add
// fields. A member of the wrong JSON type is a *json.UnmarshalTypeError;
// every other error says what is wrong without quoting the body.
func Decode(body []byte, v any) error {
	if err := Check(body, reflect.TypeOf(v).Elem()); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return te
		}
		return errors.New("the body does not decode as the provider's payload")
	}
	return nil
}

// Check applies Decode's checks to body for the payload modeled by t. It
// reads the body once, byte by byte, and allocates only for what it
// reports and for objects of many members: the strict reading costs a
// fraction of decoding.
func Check(body []byte, t reflect.Type) error {
	if !utf8.Valid(body) {
		return errors.New("the body is not valid UTF-8")
	}
	c := checker{body: body}
	c.space()
	if c.pos == len(body) {
		return errEnded
	}
	if body[c.pos] != '{' {
		if body[c.pos] != '[' { // a scalar: say first what is wrong with it, if anything
			if err := c.value(1, nil, ""); err != nil {
				return err
			}
		}
		return errors.New("the body must be a JSON object")
	}
	if err := c.object(1, modelOf(t), ""); err != nil {
		return err
	}
	c.space()
	if c.pos != len(body) {
		return errors.New("the body has more data after the JSON object")
	}
	return nil
}

var errEnded = errors.New("the body is empty or ends before the JSON object is complete")

// checker reads one JSON text strictly.
type checker struct {
	body []byte
	pos  int
}

func (c *checker) syntax() error {
	if c.pos >= len(c.body) {
		return errEnded
	}
	return fmt.Errorf("the body is not valid JSON (error near byte %d)", c.pos)
}

func (c *checker) space() {
	for c.pos < len(c.body) {
		switch c.body[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// value reads any value at nesting depth (of the containers around it,
// plus one); m is the model of an object value, when modeled.
func (c *checker) value(depth int, m *model, path string) error {
	c.space()
	if c.pos >= len(c.body) {
		return errEnded
	}
	switch b := c.body[c.pos]; {
	case b == '{':
		return c.object(depth, m, path)
	case b == '[':
		return c.array(depth)
	case b == '"':
		_, _, err := c.str()
		return err
	case b == '-' || b >= '0' && b <= '9':
		return c.number()
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	}
	return c.syntax()
}

func (c *checker) literal(word string) error {
	for i := range len(word) {
		if c.pos >= len(c.body) || c.body[c.pos] != word[i] {
			return c.syntax()
		}
		c.pos++
	}
	return nil
}

func (c *checker) digits() int {
	n := 0
	for c.pos < len(c.body) && c.body[c.pos] >= '0' && c.body[c.pos] <= '9' {
		c.pos++
		n++
	}
	return n
}

func (c *checker) number() error {
	if c.body[c.pos] == '-' {
		c.pos++
	}
	if c.pos < len(c.body) && c.body[c.pos] == '0' {
		c.pos++
	} else if c.digits() == 0 {
		return c.syntax()
	}
	if c.pos < len(c.body) && c.body[c.pos] == '.' {
		c.pos++
		if c.digits() == 0 {
			return c.syntax()
		}
	}
	if c.pos < len(c.body) && (c.body[c.pos] == 'e' || c.body[c.pos] == 'E') {
		c.pos++
		if c.pos < len(c.body) && (c.body[c.pos] == '+' || c.body[c.pos] == '-') {
			c.pos++
		}
		if c.digits() == 0 {
			return c.syntax()
		}
	}
	return nil
}

// str reads a string; raw is its text between the quotes, escaped tells
// whether it holds escapes (raw is then not the string's value).
func (c *checker) str() (raw []byte, escaped bool, err error) {
	c.pos++ // the opening quote
	start := c.pos
	for c.pos < len(c.body) {
		switch b := c.body[c.pos]; {
		case b == '"':
			raw = c.body[start:c.pos]
			c.pos++
			return raw, escaped, nil
		case b == '\\':
			escaped = true
			c.pos++
			if c.pos >= len(c.body) {
				return nil, false, errEnded
			}
			switch c.body[c.pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				c.pos++
			case 'u':
				c.pos++
				for range 4 {
					if c.pos >= len(c.body) {
						return nil, false, errEnded
					}
					if !isHex(c.body[c.pos]) {
						return nil, false, c.syntax()
					}
					c.pos++
				}
			default:
				return nil, false, c.syntax()
			}
		case b < 0x20:
			return nil, false, c.syntax()
		default:
			c.pos++
		}
	}
	return nil, false, errEnded
}

func isHex(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F'
}

func (c *checker) array(depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("the body nests deeper than %d levels", MaxDepth)
	}
	c.pos++ // [
	c.space()
	if c.pos < len(c.body) && c.body[c.pos] == ']' {
		c.pos++
		return nil
	}
	for {
		if err := c.value(depth+1, nil, ""); err != nil {
			return err
		}
		if end, err := c.after(']'); end || err != nil {
			return err
		}
	}
}

// after reads what follows a member or element of a container that
// closer ends: a comma (end is false) or closer (end is true).
func (c *checker) after(closer byte) (end bool, err error) {
	c.space()
	if c.pos >= len(c.body) {
		return false, errEnded
	}
	switch c.body[c.pos] {
	case ',':
		c.pos++
		return false, nil
	case closer:
		c.pos++
		return true, nil
	}
	return false, c.syntax()
}

// smallObject is the number of members an object's names are compared
// with one by one; past it they go into a map.
const smallObject = 16

// object reads an object at depth; m models its members (nil: none are)
// and path is the member path to it, for messages.
func (c *checker) object(depth int, m *model, path string) error {
	if depth > MaxDepth {
		return fmt.Errorf("the body nests deeper than %d levels", MaxDepth)
	}
	c.pos++ // {
	var (
		few   [smallObject][]byte
		names = few[:0]
		many  map[string]struct{}
	)
	c.space()
	if c.pos < len(c.body) && c.body[c.pos] == '}' {
		c.pos++
		return nil
	}
	for {
		c.space()
		if c.pos >= len(c.body) {
			return errEnded
		}
		if c.body[c.pos] != '"' {
			return c.syntax()
		}
		quoted := c.pos
		key, escaped, err := c.str()
		if err != nil {
			return err
		}
		if escaped { // rare: the name is compared by its value
			var s string
			if err := json.Unmarshal(c.body[quoted:c.pos], &s); err != nil {
				return c.syntax()
			}
			key = []byte(s)
		}
		// The same name twice: a parser could take either value.
		dup := false
		if many != nil {
			_, dup = many[string(key)]
			many[string(key)] = struct{}{}
		} else {
			for _, n := range names {
				if bytes.Equal(n, key) {
					dup = true
					break
				}
			}
			if names = append(names, key); len(names) > smallObject {
				many = make(map[string]struct{}, 2*len(names))
				for _, n := range names {
					many[string(n)] = struct{}{}
				}
			}
		}
		if dup {
			where := "a nested object"
			switch {
			case m != nil && path == "":
				where = "the top level"
			case m != nil:
				where = strings.TrimSuffix(path, ".")
			}
			return fmt.Errorf("a member name appears twice in the same object (%s)", where)
		}
		var child *model
		if m != nil {
			for i, k := range m.keys {
				if !bytes.Equal(key, k) && bytes.EqualFold(key, k) {
					return fmt.Errorf("member name must be spelled exactly %q", path+m.names[i])
				}
			}
			child = m.children[string(key)]
		}
		c.space()
		if c.pos >= len(c.body) {
			return errEnded
		}
		if c.body[c.pos] != ':' {
			return c.syntax()
		}
		c.pos++
		childPath := ""
		if child != nil {
			childPath = path + string(key) + "."
		}
		if err := c.value(depth+1, child, childPath); err != nil {
			return err
		}
		if end, err := c.after('}'); end || err != nil {
			return err
		}
	}
}

// model is the modeled members of one object level.
type model struct {
	names    []string
	keys     [][]byte          // names, as bytes
	children map[string]*model // members that are modeled objects
}

var models sync.Map // reflect.Type → *model

// modelOf derives the members of struct type t from its `json` tags, and
// those of its struct-typed members, recursively.
func modelOf(t reflect.Type) *model {
	if m, ok := models.Load(t); ok {
		return m.(*model)
	}
	m := &model{children: map[string]*model{}}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m.names = append(m.names, name)
		m.keys = append(m.keys, []byte(name))
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() != "time" {
			m.children[name] = modelOf(ft)
		}
	}
	models.Store(t, m)
	return m
}
