package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

const document = "../../../server/apidocs/fulfillment.swagger.json"

var file = fulfillmentv1.File_fulfillment_v1_fulfillment_proto

// The rule is protojson's: an empty message of each kind, written as the
// REST gateway writes answers (restMarshaler in server/gateway.go), has
// null exactly in the fields nullable names.
func TestNullableIsWhatProtojsonWritesAsNull(t *testing.T) {
	t.Parallel()
	opts := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	var walk func(msgs protoreflect.MessageDescriptors)
	walk = func(msgs protoreflect.MessageDescriptors) {
		for i := range msgs.Len() {
			md := msgs.Get(i)
			walk(md.Messages())
			if md.IsMapEntry() {
				continue
			}
			b, err := opts.Marshal(dynamicpb.NewMessage(md))
			if err != nil {
				t.Fatal(err)
			}
			var members map[string]any
			if err := json.Unmarshal(b, &members); err != nil {
				t.Fatal(err)
			}
			for j := range md.Fields().Len() {
				f := md.Fields().Get(j)
				v, present := members[string(f.Name())]
				if written := present && v == nil; written != nullable(f) {
					t.Errorf("%s: written as null %v, nullable says %v", f.FullName(), written, nullable(f))
				}
			}
		}
	}
	walk(file.Messages())
}

// The committed document is what make generate makes of it: marked, and
// written as the generator writes (the marks are all that is added).
func TestCommittedDocumentIsMarked(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(document)
	if err != nil {
		t.Fatal(err)
	}
	out, err := markNullable(doc, file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, doc) {
		t.Errorf("%s is not what make generate writes: run it", document)
	}
	unmarked := strings.ReplaceAll(strings.ReplaceAll(string(doc), `,
          "x-nullable": true`, ""), `"x-nullable": true,`, "")
	if unmarked == string(doc) {
		t.Fatal("the document has no marks")
	}
	out, err = markNullable([]byte(unmarked), file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, doc) {
		t.Error("the document, its marks taken out, is not marked again as it was")
	}
	// Among them, the ones a strict client met first.
	var parsed struct {
		Definitions map[string]struct {
			Properties map[string]map[string]any `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(doc, &parsed); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"v1Order.history", "v1Order.settlement", "v1Access.until", "v1ReconciliationSummary.oldest_open_age",
		"v1ReconciliationEvidence.payment_start"} {
		def, prop, _ := strings.Cut(p, ".")
		if marked, _ := parsed.Definitions[def].Properties[prop]["x-nullable"].(bool); !marked {
			t.Errorf("%s is not marked x-nullable", p)
		}
	}
	for _, p := range []string{"v1Order.lines", "v1Order.id", "v1InboxEvent.refs", "v1OrderLine.line_no"} {
		def, prop, _ := strings.Cut(p, ".")
		if _, ok := parsed.Definitions[def].Properties[prop]["x-nullable"]; ok {
			t.Errorf("%s is marked x-nullable", p)
		}
	}
}

// What the document cannot be matched with is an error, not a property
// left unmarked.
func TestUnmatchedDocumentIsAnError(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(document)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ old, new, want string }{
		"a property that is no field": {`"v1Order": {
      "type": "object",
      "properties": {`, `"v1Order": {
      "type": "object",
      "properties": {
        "extra": {"type": "string"},`, "v1Order.extra: no field of fulfillment.v1.Order"},
		"a definition no operation reaches": {`"definitions": {`, `"definitions": {
    "v1Orphan": {"type": "object"},`, "v1Orphan"},
		"an operation of no method": {`"operationId": "FulfillmentService_GetOrder"`,
			`"operationId": "GetOrder"`, `operationId "GetOrder" names no method`},
		"properties in json_name": {`"merchant_order_id": {`, `"merchantOrderId": {`, "merchantOrderId: no field"},
	} {
		changed := strings.Replace(string(doc), c.old, c.new, 1)
		if changed == string(doc) {
			t.Fatalf("%s: the document has no %q", name, c.old)
		}
		_, err := markNullable([]byte(changed), file)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", name, err, c.want)
		}
	}
}

// A document protoc-gen-openapiv2 never writes comes back as it was, but
// for the marks.
func TestOrderAndSpellingKept(t *testing.T) {
	t.Parallel()
	root, err := parse([]byte(`{"z": [1.50, {}, [], null, "<&>"], "a": {"b": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"z":[1.50,{},[],null,"\u003c\u0026\u003e"],"a":{"b":true}}`; string(b) != want {
		t.Errorf("written %s, want %s", b, want)
	}
	if o := root; !slices.Equal(o.keys, []string{"z", "a"}) {
		t.Errorf("keys %q", o.keys)
	}
}
