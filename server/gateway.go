package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest"
	"github.com/fulfillplatform/fulfillment/internal/httpmetrics"
)

// Readiness reports whether the service can do its work.
type Readiness interface {
	// Ping checks the database answers.
	Ping(ctx context.Context) error
	// SchemaVersion reports applied and latest migration versions.
	SchemaVersion(ctx context.Context) (applied, latest int32, err error)
}

// readiness tells whether this process can do all of its work: the
// database answers, its schema is current, and every queue it runs can
// claim work. It answers 200 or 503 and the body of GET /readyz; the gRPC
// health service follows it. Webhooks are acknowledged whatever it says.
func (s *Server) readiness(ctx context.Context) (code int, body map[string]any) {
	if err := s.store.Ping(ctx); err != nil {
		// The store says once that the database is unreachable.
		s.log.DebugContext(ctx, "not ready: database unreachable", "error", err)
		return http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "reason": "database unreachable"}
	}
	applied, latest, err := s.store.SchemaVersion(ctx)
	if err != nil {
		if errors.Is(err, fulfillment.ErrUnavailable) {
			s.log.DebugContext(ctx, "not ready: reading schema version", "error", err)
		} else {
			s.log.WarnContext(ctx, "not ready: reading schema version", "error", err)
		}
		return http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "reason": "schema version unknown"}
	}
	if applied < latest {
		return http.StatusServiceUnavailable, map[string]any{
			"status": "unavailable", "reason": "migrations pending: run fulfillmentd migrate",
			"schema_version": applied, "latest_version": latest,
		}
	}
	// A schema newer than this binary's (applied > latest) is one it runs
	// on: an older replica during an upgrade, or a binary rolled back.
	if s.opts.Queues != nil {
		if down := s.opts.Queues(); len(down) > 0 {
			names := make([]string, 0, len(down))
			for name := range down {
				names = append(names, name)
			}
			slices.Sort(names)
			// The causes are in the log (they may name hosts and roles):
			// this answer is for any caller.
			return http.StatusServiceUnavailable, map[string]any{
				"status": "unavailable", "reason": "queues cannot claim work (the cause is in the log): " + strings.Join(names, ", "),
				"queues_down": names, "schema_version": applied,
			}
		}
	}
	if applied > latest {
		return http.StatusOK, map[string]any{"status": "ok", "schema_version": applied, "latest_version": latest,
			"note": "the schema is newer than this binary's: it runs on it"}
	}
	return http.StatusOK, map[string]any{"status": "ok", "schema_version": applied}
}

// newHTTPHandler serves the REST gateway (translating to gRPC over the
// in-process connection, so that REST calls pass the same interceptors:
// auth, logging, recovery), the OpenAPI document, and the health endpoints.
func (s *Server) newHTTPHandler(ctx context.Context) (http.Handler, error) {
	// A misspelt query parameter is an error too. grpc-gateway keeps its
	// query parser in a package variable, read by every mux: set it once.
	useStrictQueries.Do(func() { runtime.NewServeMux(runtime.SetQueryParameterParser(strictQueryParser{})) })
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, restMarshaler),
		runtime.WithIncomingHeaderMatcher(func(key string) (string, bool) {
			if strings.EqualFold(key, requestIDHeader) {
				return requestIDHeader, true
			}
			return runtime.DefaultHeaderMatcher(key)
		}),
		// The HTTP layer already echoes X-Request-Id; no gRPC metadata leaks out.
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithErrorHandler(s.gatewayError),
		runtime.WithRoutingErrorHandler(s.routingError),
		// A POST is a POST: no form-encoded POST read as a GET, and no
		// X-HTTP-Method-Override.
		runtime.WithDisablePathLengthFallback(),
		runtime.WithMiddlewares(nameRESTRoute, noQueryWhereUnused),
	)
	if err := fulfillmentv1.RegisterFulfillmentServiceHandler(ctx, gw, s.local); err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("/v1/", s.traceREST(s.boundCall(s.guardREST(gw))))
	mux.HandleFunc("GET /openapi.json", serveOpenAPI)
	if s.opts.Metrics != nil {
		mux.Handle("GET /metrics", s.opts.Metrics)
	}
	if s.opts.Console != nil {
		console := s.opts.Console(s.local)
		mux.Handle("/console/", s.boundCall(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := addressUTF8(r); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			console.ServeHTTP(w, r)
		})))
		mux.Handle("GET /console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		code, body := s.readiness(ctx)
		writeJSON(w, code, body)
	})
	h := withRequestID(mux)
	if reg := s.opts.Registerer; reg != nil {
		h = httpmetrics.New(reg, "http").Handler(h)
	}
	return h, nil
}

// boundCall holds a REST request or a console page to grpc.max_call_duration
// from its arrival, as a gRPC call is held from its own: the calls they
// make share the in-process connection's streams
// (grpc.max_concurrent_streams), and one that waits for a stream waits
// within that time, not for as long as the calls ahead of it take. It
// allows answerMargin more, so that a call that runs out of its time is
// answered by the service (a database that does not answer is
// UNAVAILABLE, 503) before the gateway gives up on it (504, with nothing
// said of why).
func (s *Server) boundCall(next http.Handler) http.Handler {
	limit := s.cfg.GRPC.WithDefaults().MaxCallDuration + answerMargin
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), limit)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// answerMargin is how long past grpc.max_call_duration a REST request or a
// console page waits for its call's answer (boundCall).
const answerMargin = time.Second

// nameRESTRoute names the REST route of a request, for its metrics: the
// gateway's path template, such as /v1/orders/{order_id}.
func nameRESTRoute(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, pathParams map[string]string) {
		if p, ok := runtime.HTTPPattern(r.Context()); ok {
			httpmetrics.SetRoute(r.Context(), restRoute(p.String()))
		}
		next(w, r, pathParams)
	}
}

// restRoute is a gateway pattern as the API documents it: a variable
// matching one segment, {order_id=*}, is written {order_id}.
func restRoute(pattern string) string { return strings.ReplaceAll(pattern, "=*}", "}") }

// guardREST refuses what the REST gateway must not spend resources on,
// before a byte of the body is read: a request without a known bearer token
// (401), and a body over http.max_body_bytes (413). An accepted body is read
// here, bounded, so that a slow or endless one cannot hold a handler.
func (s *Server) guardREST(next http.Handler) http.Handler {
	limit := s.cfg.HTTP.WithDefaults().MaxBodyBytes
	tooLarge := fmt.Sprintf("the request body exceeds %d bytes (http.max_body_bytes)", limit)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(httpStatus int, err error) {
			if s.refusedLog.Allow() {
				s.log.InfoContext(r.Context(), "rest request refused", "method", r.Method, "code", status.Code(err).String(),
					"error", status.Convert(err).Message(), "remote", r.RemoteAddr)
			}
			refuseUnread(w, httpStatus, err)
		}
		auth := r.Header.Values("Authorization")
		if len(auth) > 1 {
			refuse(0, errTwoTokens)
			return
		}
		if _, err := s.auth.principalFor(r.Header.Get("Authorization")); err != nil {
			refuse(0, err)
			return
		}
		if err := addressUTF8(r); err != nil {
			refuse(http.StatusBadRequest, status.Error(codes.InvalidArgument, err.Error()))
			return
		}
		if ingest.Encoded(r.Header) {
			refuse(http.StatusUnsupportedMediaType, status.Error(codes.InvalidArgument,
				"send the request body as it is, without a Content-Encoding"))
			return
		}
		if r.ContentLength > limit {
			refuse(http.StatusRequestEntityTooLarge, status.Error(codes.InvalidArgument, tooLarge))
			return
		}
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
			var (
				mbe *http.MaxBytesError
				ne  net.Error
			)
			switch {
			case errors.As(err, &mbe):
				refuse(http.StatusRequestEntityTooLarge, status.Error(codes.InvalidArgument, tooLarge))
				return
			case errors.As(err, &ne) && ne.Timeout():
				refuse(http.StatusRequestTimeout, status.Error(codes.DeadlineExceeded,
					"the request body did not arrive in time (http.read_timeout)"))
				return
			case err != nil:
				refuse(http.StatusBadRequest, status.Error(codes.InvalidArgument, "the request body could not be read in full"))
				return
			}
			// (A body of white space alone is no body, as the gateway reads it.)
			if err := oneJSONValue(body); err != nil && len(bytes.TrimSpace(body)) > 0 {
				refuse(http.StatusBadRequest, status.Error(codes.InvalidArgument, err.Error()))
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(w, r)
	})
}

// oneJSONValue fails when body is not one JSON value with nothing but
// white space after it, saying where: the gateway reads the first value
// and ignores the rest (a body with trailing data would be acted on), and
// its decoder's errors name no place. What the value holds is the
// gateway's to check.
func oneJSONValue(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	var v json.RawMessage
	err := dec.Decode(&v)
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("the request body is not valid JSON at %s: %s", lineColumn(body, syntax.Offset-1), syntax.Error())
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("the request body ends before its JSON value does")
	case err != nil:
		return fmt.Errorf("the request body is not valid JSON: %w", err)
	}
	rest := dec.InputOffset()
	for i := rest; i < int64(len(body)); i++ {
		switch body[i] {
		case ' ', '\t', '\r', '\n':
		default:
			return fmt.Errorf("the request body goes on after its JSON value, at %s: it must hold one value", lineColumn(body, i))
		}
	}
	if at := loneSurrogate(body[:rest]); at >= 0 {
		return fmt.Errorf("the request body is not valid JSON at %s: %s is half of a UTF-16 surrogate pair, without its other half: a text must be valid Unicode",
			lineColumn(body, int64(at)), body[at:at+6])
	}
	return nil
}

// loneSurrogate returns the offset of the first \u escape in the valid
// JSON text that is half of a UTF-16 surrogate pair without its other
// half, or -1. Every backslash of valid JSON is inside a string.
func loneSurrogate(text []byte) int {
	for i := 0; i < len(text); i++ {
		if text[i] != '\\' {
			continue
		}
		if i+1 < len(text) && text[i+1] != 'u' {
			i++ // an escape of one character: \\, \", \n…
			continue
		}
		r := hex4At(text, i+2)
		switch {
		case r >= 0xDC00 && r <= 0xDFFF: // a low half first
			return i
		case r >= 0xD800 && r <= 0xDBFF:
			if j := i + 6; j+1 < len(text) && text[j] == '\\' && text[j+1] == 'u' {
				if low := hex4At(text, j+2); low >= 0xDC00 && low <= 0xDFFF {
					i = j + 5
					continue
				}
			}
			return i
		}
		i += 5
	}
	return -1
}

// hex4At is the value of the four hex digits at text[at:] (valid JSON has
// them after \u).
func hex4At(text []byte, at int) uint64 {
	v, _ := strconv.ParseUint(string(text[at:at+4]), 16, 16)
	return v
}

// lineColumn is where byte offset sits in text: "line L, column C", both
// counted from 1, columns in bytes.
func lineColumn(text []byte, offset int64) string {
	offset = max(min(offset, int64(len(text))), 0)
	line := 1 + bytes.Count(text[:offset], []byte("\n"))
	column := offset - int64(bytes.LastIndexByte(text[:offset], '\n'))
	return fmt.Sprintf("line %d, column %d", line, column)
}

// addressUTF8 fails when the request's path or a query parameter, decoded,
// is not UTF-8: every text the API takes is a protobuf string, which must
// be, and the gateway would fail to encode the call (an internal error)
// rather than refuse it.
func addressUTF8(r *http.Request) error {
	if !utf8.ValidString(r.URL.Path) {
		return errors.New("the request's path is not valid UTF-8 once percent-decoded")
	}
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil // (the gateway's own parser answers malformed queries)
	}
	for key, values := range query {
		if !utf8.ValidString(key) {
			return errors.New("a query parameter's name is not valid UTF-8 once percent-decoded")
		}
		for _, v := range values {
			if !utf8.ValidString(v) {
				return fmt.Errorf("query parameter %q is not valid UTF-8 once percent-decoded", key)
			}
		}
	}
	return nil
}

// restError answers a request the gateway did not forward, in the
// gateway's error format; httpStatus 0 derives the status from the gRPC
// code.
func restError(w http.ResponseWriter, httpStatus int, err error) {
	st := status.Convert(err)
	if httpStatus == 0 {
		httpStatus = runtime.HTTPStatusFromCode(st.Code())
	}
	body, merr := restMarshaler.Marshal(st.Proto())
	if merr != nil {
		body = []byte(`{"code":13,"message":"internal error","details":[]}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if st.Code() == codes.Unauthenticated {
		h.Set("WWW-Authenticate", `Bearer realm="fulfillment"`)
	}
	w.WriteHeader(httpStatus)
	_, _ = w.Write(body)
}

// refuseUnread answers a request whose body is left unread, then closes the
// connection: Go's server would otherwise read up to 256 KiB of that body,
// as slowly as the client sends it. The close lingers briefly (bounded in
// time and bytes) so that a client still sending gets the answer, not a
// connection reset.
func refuseUnread(w http.ResponseWriter, httpStatus int, err error) {
	w.Header().Set("Connection", "close")
	restError(w, httpStatus, err)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	conn, _, herr := rc.Hijack()
	if herr != nil {
		return // HTTP/2: the stream is reset; the connection serves others
	}
	go func() {
		defer func() { _ = conn.Close() }()
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_ = conn.SetReadDeadline(time.Now().Add(lingerTime))
		_, _ = io.CopyN(io.Discard, conn, lingerBytes)
	}()
}

// How long, and how much of an unread body, a refused connection is read
// before it is closed.
const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 256 << 10
)

// gatewayError writes a gRPC error as the REST answer. A response the
// server could not produce within its size bounds is reported as an internal
// error: RESOURCE_EXHAUSTED (429) would tell clients to retry the same call.
func (s *Server) gatewayError(ctx context.Context, mux *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if status.Code(err) == codes.ResourceExhausted {
		s.log.ErrorContext(ctx, "REST response exceeds the message size bounds", "method", r.Method, "path", r.URL.Path, "error", err)
		err = status.Error(codes.Internal, "the response is too large to send; ask for less (a smaller page_size)")
	}
	if st := status.Convert(err); st.Code() == codes.InvalidArgument {
		if msg, ok := bodyError(st.Message()); ok {
			err = status.Error(codes.InvalidArgument, msg)
		}
	}
	if status.Code(err) == codes.Unavailable {
		// As the webhooks' 503 says: worth trying again shortly.
		w.Header().Set("Retry-After", ingest.RetryAfterUnavailable)
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, errorMarshaler, w, r, err)
}

// errorMarshaler writes error answers (google.rpc.Status): only the
// fields that say something, unlike answers, which carry every field.
var errorMarshaler = &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{UseProtoNames: true}}

// protoJSONError is how protojson words a body it cannot read (with a
// space or, at random, a no-break space after "proto:", so that nobody
// relies on the wording):
// "proto: (line 1:22): unknown field \"x\"", "proto: syntax error (line
// 1:5): unexpected token".
var protoJSONError = regexp.MustCompile(`^proto:[\s\x{00a0}]*(syntax error)?[\s\x{00a0}]*\(line (\d+):(\d+)\):[\s\x{00a0}]*(.*)$`)

// bodyError rewords protojson's refusal of a request body for a person:
// what is wrong and where, without the library's prefix.
func bodyError(msg string) (string, bool) {
	m := protoJSONError.FindStringSubmatch(msg)
	if m == nil {
		return "", false
	}
	where := "line " + m[2] + ", column " + m[3]
	what := strings.TrimSpace(m[4])
	switch {
	case m[1] != "":
		return "the request body is not valid JSON at " + where + ": " + what, true
	case strings.HasPrefix(what, "unknown field "):
		return "the request body has an " + what + " at " + where + ": the request has no such field (names are snake_case, as in the API reference)", true
	}
	return "the request body cannot be read at " + where + ": " + what, true
}

// withRequestID gives every HTTP request an id (the caller's X-Request-Id
// when sane), echoed in the response and forwarded to gRPC.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			id = newRequestID()
			r.Header.Set("X-Request-Id", id)
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// restMarshaler reads and writes REST bodies: proto field names, every
// field present in answers, and a misspelt field in a request is an error,
// not silently dropped. An unset message field is written as null, which
// the OpenAPI document says with x-nullable (rig/cmd/apidocs marks it by
// the same rule: change both together).
var restMarshaler = &runtime.JSONPb{
	MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
	UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
}

// noQueryWhereUnused refuses query parameters on the routes that read none:
// those taking a JSON body, those naming one resource by path (their
// request has no other field), and those whose request has no field at
// all. grpc-gateway does not parse the query there, so a misspelt
// parameter would silently do nothing.
func noQueryWhereUnused(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, pathParams map[string]string) {
		if r.URL.RawQuery != "" && (r.Method != http.MethodGet || len(pathParams) > 0 || fieldlessGets[r.URL.Path]) {
			restError(w, 0, status.Error(codes.InvalidArgument,
				"unknown query parameters: this method takes none (a body's fields go in the JSON body)"))
			return
		}
		next(w, r, pathParams)
	}
}

// fieldlessGets are the GET routes whose request message has no field.
var fieldlessGets = map[string]bool{"/v1/outbox/destinations": true}

var useStrictQueries sync.Once

// strictQueryParser is grpc-gateway's query parser, refusing a parameter
// that names no field of the request (grpc-gateway ignores those, so a
// misspelt filter would silently list everything).
type strictQueryParser struct{}

// Parse implements runtime.QueryParameterParser.
func (strictQueryParser) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	md := msg.ProtoReflect().Descriptor()
	for key := range values {
		if !knownField(md, key) {
			return fmt.Errorf("unknown query parameter %q: this method accepts %s", key, fieldNames(md))
		}
	}
	if err := (&runtime.DefaultQueryParser{}).Parse(msg, values, filter); err != nil {
		return queryError(md, values, err)
	}
	return nil
}

// queryParseError is how grpc-gateway's query parser says which parameter
// it could not read: `parsing field "page_size": strconv.ParseInt: …`.
var queryParseError = regexp.MustCompile(`^parsing field "([^"]+)": `)

// queryError rewords the query parser's refusal for a person: the
// parameter, its value and what it must be, without the library's
// internals (Go's parse errors, its time layout).
func queryError(md protoreflect.MessageDescriptor, values url.Values, err error) error {
	m := queryParseError.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	key := m[1]
	fd := md.Fields().ByTextName(key)
	if fd == nil {
		fd = md.Fields().ByJSONName(key)
	}
	if fd == nil {
		return err
	}
	value := values.Get(fd.TextName())
	if value == "" {
		value = values.Get(fd.JSONName())
	}
	var want string
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind,
		protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind,
		protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind:
		want = "a whole number in the parameter's range"
	case protoreflect.BoolKind:
		want = "true or false"
	case protoreflect.EnumKind:
		want = "one of the values the API reference lists"
	case protoreflect.MessageKind:
		if fd.Message().FullName() == "google.protobuf.Timestamp" {
			want = `an RFC 3339 time such as "2026-11-29T10:15:30Z"`
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind, protoreflect.StringKind, protoreflect.BytesKind, protoreflect.GroupKind:
		// (No request of the API has such a field the parser can refuse.)
	}
	if want == "" {
		return err
	}
	return fmt.Errorf("query parameter %s: %q is not %s", fd.TextName(), value, want)
}

// knownField reports whether a query key (a dotted field path, by proto or
// JSON names, optionally with a [map key]) names a field of md.
func knownField(md protoreflect.MessageDescriptor, key string) bool {
	key, _, _ = strings.Cut(key, "[")
	for part := range strings.SplitSeq(key, ".") {
		if md == nil {
			return false
		}
		fd := md.Fields().ByTextName(part)
		if fd == nil {
			fd = md.Fields().ByJSONName(part)
		}
		if fd == nil {
			return false
		}
		md = fd.Message()
	}
	return true
}

func fieldNames(md protoreflect.MessageDescriptor) string {
	names := make([]string, md.Fields().Len())
	for i := range names {
		names[i] = string(md.Fields().Get(i).Name())
	}
	return strings.Join(names, ", ")
}

// traceREST gives each REST request a server span, continuing a caller's
// traceparent, when tracing is on: the gRPC call it becomes is its child.
func (s *Server) traceREST(h http.Handler) http.Handler {
	tp := s.opts.TracerProvider
	if tp == nil {
		return h
	}
	return otelhttp.NewHandler(h, "REST", otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "REST " + r.Method }))
}
