package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// pathRoute is a path template of the REST gateway and its methods: its
// segments, the last one's custom verb ("resolve" of
// "/v1/reconciliation/items/{item_id}:resolve") apart.
type pathRoute struct {
	segments []string
	verb     string
	methods  []string
}

// pathRoutes are the gateway's routes, read from its OpenAPI document
// (which the gateway's code is generated with): what a 405 answer's Allow
// header lists.
var pathRoutes = func() []pathRoute {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		panic("server: the embedded OpenAPI document does not parse: " + err.Error())
	}
	routes := make([]pathRoute, 0, len(doc.Paths))
	for path, ops := range doc.Paths {
		segments, verb := splitVerb(path)
		r := pathRoute{segments: segments, verb: verb}
		for m := range ops {
			r.methods = append(r.methods, strings.ToUpper(m))
		}
		slices.Sort(r.methods)
		routes = append(routes, r)
	}
	return routes
}()

// splitVerb splits a path into its segments and the last one's custom
// verb ("" for none).
func splitVerb(path string) (segments []string, verb string) {
	segments = strings.Split(strings.Trim(path, "/"), "/")
	last := segments[len(segments)-1]
	// A verb follows the last ':' outside a {variable}.
	if i := strings.LastIndexByte(last, ':'); i > 0 && !strings.Contains(last[i:], "}") {
		segments[len(segments)-1], verb = last[:i], last[i+1:]
	}
	return segments, verb
}

// allowedMethods lists, as an Allow header says, the methods of the
// routes path matches; "" when none does.
func allowedMethods(path string) string {
	segments, verb := splitVerb(path)
	var methods []string
	for _, r := range pathRoutes {
		if r.verb != verb || len(r.segments) != len(segments) {
			continue
		}
		match := true
		for i, s := range r.segments {
			if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
				match = segments[i] != ""
			} else {
				match = s == segments[i]
			}
			if !match {
				break
			}
		}
		if match {
			methods = append(methods, r.methods...)
		}
	}
	slices.Sort(methods)
	return strings.Join(slices.Compact(methods), ", ")
}

// routingError answers a request the gateway has no route for: a method
// the path does not take is 405 with the methods it does take (the
// gateway's own answer is 501, without them); anything else as the
// gateway answers it.
func (s *Server) routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	if httpStatus != http.StatusMethodNotAllowed {
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, httpStatus)
		return
	}
	msg := r.Method + " is not a method of " + r.URL.Path
	if allow := allowedMethods(r.URL.Path); allow != "" {
		w.Header().Set("Allow", allow)
		msg += ": it takes " + allow
	}
	s.gatewayError(ctx, mux, m, w, r, &runtime.HTTPStatusError{HTTPStatus: http.StatusMethodNotAllowed,
		Err: status.Error(codes.Unimplemented, msg)})
}
