// Package providers is the registry of payment providers: the one list of
// what `endpoints[].provider` may name, each with its adapter. Adding a
// provider means adding its adapter package and one line here.
package providers

import (
	"slices"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// all are the providers with an adapter.
var all = []ingest.Provider{
	yolfi.Provider,
	tbank.Provider,
}

// Lookup returns the provider named name.
func Lookup(name fulfillment.Provider) (ingest.Provider, bool) {
	i := slices.IndexFunc(all, func(p ingest.Provider) bool { return p.Name == name })
	if i < 0 {
		return ingest.Provider{}, false
	}
	return all[i], true
}

// Names lists the providers' names.
func Names() []string {
	names := make([]string, len(all))
	for i, p := range all {
		names[i] = string(p.Name)
	}
	return names
}
