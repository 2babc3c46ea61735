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
	"io"
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

// Check applies Decode's checks to body for the payload modeled by t.
func Check(body []byte, t reflect.Type) error {
	if !utf8.Valid(body) {
		return errors.New("the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return syntaxProblem(err, dec)
		}
		var parent *frame
		if len(stack) > 0 {
			parent = stack[len(stack)-1]
		}
		if parent == nil && tok != json.Delim('{') {
			return errors.New("the body must be a JSON object")
		}
		if parent != nil && parent.object && parent.wantKey {
			// Decoder.Token only returns a string or '}' here.
			if tok != json.Delim('}') {
				key, _ := tok.(string)
				if err := parent.name(key); err != nil {
					return err
				}
				parent.key, parent.wantKey = key, false
				continue
			}
			stack = stack[:len(stack)-1]
		} else {
			switch tok {
			case json.Delim('{'), json.Delim('['):
				if len(stack) >= MaxDepth {
					return fmt.Errorf("the body nests deeper than %d levels", MaxDepth)
				}
				f := &frame{object: tok == json.Delim('{'), wantKey: true}
				switch {
				case parent == nil:
					f.model = modelOf(t)
				case parent.object && parent.model != nil:
					f.model, f.path = parent.model.children[parent.key], parent.path+parent.key+"."
				}
				if f.object {
					f.names = make(map[string]struct{})
				}
				stack = append(stack, f)
				continue
			case json.Delim(']'):
				stack = stack[:len(stack)-1]
			}
		}
		// A value just ended (a scalar or a closed container).
		if len(stack) == 0 {
			break
		}
		if top := stack[len(stack)-1]; top.object {
			top.wantKey = true
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("the body has more data after the JSON object")
	}
	return nil
}

// frame is an object or array being read.
type frame struct {
	object  bool
	wantKey bool
	key     string
	names   map[string]struct{}
	model   *model // the modeled members at this level; nil elsewhere
	path    string // the member path to this level, for messages
}

// name records a member name of an object.
func (f *frame) name(key string) error {
	if _, dup := f.names[key]; dup {
		where := "a nested object"
		switch {
		case f.model != nil && f.path == "":
			where = "the top level"
		case f.model != nil:
			where = strings.TrimSuffix(f.path, ".")
		}
		return fmt.Errorf("a member name appears twice in the same object (%s)", where)
	}
	f.names[key] = struct{}{}
	if f.model != nil {
		for _, k := range f.model.names {
			if key != k && strings.EqualFold(key, k) {
				return fmt.Errorf("member name must be spelled exactly %q", f.path+k)
			}
		}
	}
	return nil
}

func syntaxProblem(err error, dec *json.Decoder) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("the body is empty or ends before the JSON object is complete")
	}
	return fmt.Errorf("the body is not valid JSON (error near byte %d)", dec.InputOffset())
}

// model is the modeled members of one object level.
type model struct {
	names    []string
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
