// Command apidocs finishes the OpenAPI document make generate writes: it
// marks "x-nullable": true on every property the REST gateway may answer as
// JSON null.
//
//	go run ./rig/cmd/apidocs server/apidocs/fulfillment.swagger.json
//
// The gateway writes every field (EmitUnpopulated, server/gateway.go), and
// protojson writes an unset singular message field — one of ours, or a
// well-known type such as Timestamp or Duration — as null; clients rely on
// it (docs/api.md: history is null when not included). protoc-gen-openapiv2
// does not say so, and a client generated strictly from the document breaks
// on the null.
//
// The mark is decided here, from each field's descriptor, so that a new
// message field gets it without anyone remembering to. It is a step of make
// generate rather than a rewrite when the service starts so that the committed
// document is byte for byte what GET /openapi.json serves, and a review of a
// proto change shows the marks it brings. The generator's order and
// indentation are kept, and running it again changes nothing.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: apidocs FILE.swagger.json")
		os.Exit(2)
	}
	if err := rewrite(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "apidocs:", err)
		os.Exit(1)
	}
}

func rewrite(name string) error {
	raw, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	out, err := markNullable(raw, fulfillmentv1.File_fulfillment_v1_fulfillment_proto)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if bytes.Equal(out, raw) {
		return nil
	}
	return os.WriteFile(name, out, 0o644)
}

// nullable reports whether protojson, emitting unpopulated fields, writes
// f as null when it is unset: a singular message field outside a oneof.
// Lists and maps are written empty, scalars as their zero value, and an
// unset member of a oneof (proto3 optional fields among them) is left out.
func nullable(f protoreflect.FieldDescriptor) bool {
	return f.Message() != nil && f.Cardinality() != protoreflect.Repeated && f.ContainingOneof() == nil
}

// markNullable returns doc, a Swagger 2.0 document protoc-gen-openapiv2
// made from file, with x-nullable on every property of a nullable field.
//
// The document does not name the message of a definition, so each is
// found from the operations: an operation's body is its method's input,
// its 200 answer the output, its other answers google.rpc.Status (the
// gateway's error format); a property's schema, or its items or map
// values, is its field's message. A definition no operation reaches, or a
// property that names no field, is an error: nothing is left unmarked
// silently.
func markNullable(doc []byte, file protoreflect.FileDescriptor) ([]byte, error) {
	root, err := parse(doc)
	if err != nil {
		return nil, err
	}
	m := marker{definitions: root.object("definitions"), seen: map[string]protoreflect.MessageDescriptor{}}
	if m.definitions == nil {
		return nil, errors.New("no definitions")
	}

	methods := map[string]protoreflect.MethodDescriptor{} // by operationId
	for i := range file.Services().Len() {
		s := file.Services().Get(i)
		for j := range s.Methods().Len() {
			methods[string(s.Name())+"_"+string(s.Methods().Get(j).Name())] = s.Methods().Get(j)
		}
	}
	errorFormat := (&status.Status{}).ProtoReflect().Descriptor()
	paths := root.object("paths")
	for _, path := range paths.keys {
		ops := paths.object(path)
		for _, verb := range ops.keys {
			op := ops.object(verb)
			id, _ := op.values["operationId"].(string)
			method, ok := methods[id]
			if !ok {
				return nil, fmt.Errorf("paths.%s.%s: operationId %q names no method of %s", path, verb, id, file.Path())
			}
			params, _ := op.values["parameters"].([]any)
			for _, p := range params {
				if p, ok := p.(*object); ok && p.values["in"] == "body" {
					if err := m.bind(id+" body", p.object("schema"), method.Input()); err != nil {
						return nil, err
					}
				}
			}
			responses := op.object("responses")
			for _, code := range responses.keys {
				msg := errorFormat
				if code == "200" {
					msg = method.Output()
				}
				if err := m.bind(id+" "+code, responses.object(code).object("schema"), msg); err != nil {
					return nil, err
				}
			}
		}
	}
	var unreached []string
	for _, name := range m.definitions.keys {
		if _, ok := m.seen[name]; !ok {
			unreached = append(unreached, name)
		}
	}
	if len(unreached) > 0 {
		// The API has no enum (its enumerations are strings): a property
		// naming an enum's definition would land here too, and bind would
		// then have to follow it.
		return nil, fmt.Errorf("no operation reaches the definitions %s: their messages are unknown (an enum's definition, "+
			"which this step does not follow yet, is one)", strings.Join(unreached, ", "))
	}

	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	// As protoc-gen-openapiv2 writes it (its JSON format).
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// marker binds the document's schemas to messages and marks their
// nullable properties.
type marker struct {
	definitions *object
	seen        map[string]protoreflect.MessageDescriptor // definitions bound, by name
}

// bind marks the properties of schema (a $ref to a definition or an inline
// object; nil for none), whose values are msg.
func (m *marker) bind(where string, schema *object, msg protoreflect.MessageDescriptor) error {
	if schema == nil {
		return nil
	}
	if ref, ok := schema.values["$ref"].(string); ok {
		name, ok := strings.CutPrefix(ref, "#/definitions/")
		def := m.definitions.object(name)
		if !ok || def == nil {
			return fmt.Errorf("%s: unresolvable $ref %q", where, ref)
		}
		if prev, ok := m.seen[name]; ok {
			if prev.FullName() != msg.FullName() {
				return fmt.Errorf("%s: definition %s is both %s and %s", where, name, prev.FullName(), msg.FullName())
			}
			return nil
		}
		m.seen[name] = msg
		where, schema = name, def
	}
	// The well-known types have JSON forms of their own (a Timestamp is a
	// string, an Any an object with @type): their fields are not properties.
	if msg.ParentFile().Package() == "google.protobuf" {
		return nil
	}
	props := schema.object("properties")
	if props == nil {
		return nil
	}
	for _, name := range props.keys {
		prop := props.object(name)
		f := msg.Fields().ByName(protoreflect.Name(name))
		if f == nil || prop == nil {
			return fmt.Errorf("%s.%s: no field of %s", where, name, msg.FullName())
		}
		if nullable(f) {
			prop.set("x-nullable", true)
		}
		switch {
		case f.IsMap():
			if f.MapValue().Message() != nil {
				if err := m.bind(where+"."+name, prop.object("additionalProperties"), f.MapValue().Message()); err != nil {
					return err
				}
			}
		case f.Message() != nil && f.IsList():
			if err := m.bind(where+"."+name, prop.object("items"), f.Message()); err != nil {
				return err
			}
		case f.Message() != nil:
			if err := m.bind(where+"."+name, prop, f.Message()); err != nil {
				return err
			}
		}
	}
	return nil
}

// object is a JSON object that keeps its members in the order they were
// read, so that the document is written back as the generator wrote it.
type object struct {
	keys   []string
	values map[string]any
}

// object returns the member name when it is an object, else nil.
func (o *object) object(name string) *object {
	if o == nil {
		return nil
	}
	v, _ := o.values[name].(*object)
	return v
}

// set sets the member name, appending it when new.
func (o *object) set(name string, v any) {
	if _, ok := o.values[name]; !ok {
		o.keys = append(o.keys, name)
	}
	o.values[name] = v
}

func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		key, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		val, err := json.Marshal(o.values[k])
		if err != nil {
			return nil, err
		}
		b.Write(key)
		b.WriteByte(':')
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// parse reads a JSON object.
func parse(doc []byte) (*object, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	v, err := read(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one JSON value")
	}
	root, ok := v.(*object)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return root, nil
}

// read reads one JSON value: an *object, a []any, or a scalar as the
// decoder gives it (numbers as json.Number, written back as they were).
func read(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	switch delim {
	case '{':
		o := &object{values: map[string]any{}}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key, _ := tok.(string)
			if _, dup := o.values[key]; dup {
				return nil, fmt.Errorf("member %q twice", key)
			}
			v, err := read(dec)
			if err != nil {
				return nil, err
			}
			o.set(key, v)
		}
		_, err := dec.Token() // }
		return o, err
	case '[':
		list := []any{}
		for dec.More() {
			v, err := read(dec)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		_, err := dec.Token() // ]
		return list, err
	default:
		return nil, fmt.Errorf("unexpected %v", delim)
	}
}
