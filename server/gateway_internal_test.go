package server

import (
	"testing"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// A GET route whose request has no field reads no query (grpc-gateway
// skips the parser), so fieldlessGets must name every such method's route:
// a new one fails here until it is added.
func TestFieldlessGetsNameEveryFieldlessRequest(t *testing.T) {
	t.Parallel()
	methods := fulfillmentv1.File_fulfillment_v1_fulfillment_proto.Services().ByName("FulfillmentService").Methods()
	var fieldless []string
	for i := range methods.Len() {
		if m := methods.Get(i); m.Input().Fields().Len() == 0 {
			fieldless = append(fieldless, string(m.Name()))
		}
	}
	if len(fieldless) != 1 || fieldless[0] != "ListDestinations" || !fieldlessGets["/v1/outbox/destinations"] || len(fieldlessGets) != 1 {
		t.Fatalf("methods with fieldless requests: %v; fieldlessGets: %v — name each one's GET route in fieldlessGets", fieldless, fieldlessGets)
	}
}
