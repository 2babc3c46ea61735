package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// Principal is an authenticated caller.
type Principal struct {
	// Name identifies the token in logs; it is not a secret.
	Name   string
	scopes []string
	orgs   []string // nil: every org
}

// HasScope reports whether p holds scope. Admin holds every scope but
// ingest: only a webhook gateway, which verified a provider's signature, may
// record provider events.
func (p *Principal) HasScope(scope string) bool {
	return slices.Contains(p.scopes, scope) || (scope != config.ScopeIngest && slices.Contains(p.scopes, config.ScopeAdmin))
}

// AllowsOrg reports whether p may act for org.
func (p *Principal) AllowsOrg(org string) bool {
	return p.orgs == nil || slices.Contains(p.orgs, org)
}

// VisibleOrgs returns the orgs p may see, nil meaning all.
func (p *Principal) VisibleOrgs() []string { return p.orgs }

// OwnsOrg reports whether p was given org by name: a token for every org
// ("*") administers orgs but does not own them, and so does not see their
// secrets (license keys).
func (p *Principal) OwnsOrg(org string) bool { return slices.Contains(p.orgs, org) }

// methodScopes says which scope each RPC needs. An RPC missing here is
// refused: a new method cannot be exposed by forgetting to list it.
var methodScopes = map[string]string{
	fulfillmentv1.FulfillmentService_CreateOrder_FullMethodName:               config.ScopeOrdersWrite,
	fulfillmentv1.FulfillmentService_StartPayment_FullMethodName:              config.ScopeOrdersWrite,
	fulfillmentv1.FulfillmentService_GetOrder_FullMethodName:                  config.ScopeOrdersRead,
	fulfillmentv1.FulfillmentService_ListOrders_FullMethodName:                config.ScopeOrdersRead,
	fulfillmentv1.FulfillmentService_RecordEvent_FullMethodName:               config.ScopeIngest,
	fulfillmentv1.FulfillmentService_ListReconciliationItems_FullMethodName:   config.ScopeReconciliationRead,
	fulfillmentv1.FulfillmentService_GetReconciliationSummary_FullMethodName:  config.ScopeReconciliationRead,
	fulfillmentv1.FulfillmentService_GetActivity_FullMethodName:               config.ScopeReconciliationRead,
	fulfillmentv1.FulfillmentService_GetReconciliationItem_FullMethodName:     config.ScopeReconciliationRead,
	fulfillmentv1.FulfillmentService_ResolveReconciliationItem_FullMethodName: config.ScopeReconciliationWrite,
	// Stored events carry payers' data (and raw bodies): admin only for
	// now. GetInboxEvent includes a raw body only when the caller holds
	// admin itself (rawBodyScope), so a later read scope would not see one.
	fulfillmentv1.FulfillmentService_ListInboxEvents_FullMethodName:       config.ScopeAdmin,
	fulfillmentv1.FulfillmentService_GetInboxEvent_FullMethodName:         config.ScopeAdmin,
	fulfillmentv1.FulfillmentService_ReplayInboxEvent_FullMethodName:      config.ScopeAdmin,
	fulfillmentv1.FulfillmentService_ListOutboxMessages_FullMethodName:    config.ScopeOutboxRead,
	fulfillmentv1.FulfillmentService_GetOutboxMessage_FullMethodName:      config.ScopeOutboxRead,
	fulfillmentv1.FulfillmentService_RetryOutboxMessage_FullMethodName:    config.ScopeAdmin,
	fulfillmentv1.FulfillmentService_ConfirmOutboxDelivery_FullMethodName: config.ScopeAdmin,
	fulfillmentv1.FulfillmentService_ListDestinations_FullMethodName:      config.ScopeAdmin,
	fulfillmentv1.FulfillmentService_DisableDestination_FullMethodName:    config.ScopeAdmin,
	fulfillmentv1.FulfillmentService_EnableDestination_FullMethodName:     config.ScopeAdmin,
	fulfillmentv1.FulfillmentService_WatchOrderEvents_FullMethodName:      config.ScopeOrdersRead,
	// Subscriptions are created by whoever creates orders (a checkout),
	// and read by whoever reads orders (CheckAccess: the services that
	// sell the plans).
	fulfillmentv1.FulfillmentService_CreateSubscription_FullMethodName: config.ScopeOrdersWrite,
	fulfillmentv1.FulfillmentService_GetSubscription_FullMethodName:    config.ScopeOrdersRead,
	fulfillmentv1.FulfillmentService_ListSubscriptions_FullMethodName:  config.ScopeOrdersRead,
	fulfillmentv1.FulfillmentService_CheckAccess_FullMethodName:        config.ScopeOrdersRead,
	// Bulk re-drive replays events and retries messages: admin, like one.
	fulfillmentv1.FulfillmentService_PlanRedrive_FullMethodName:   config.ScopeAdmin,
	fulfillmentv1.FulfillmentService_StartRedrive_FullMethodName:  config.ScopeAdmin,
	fulfillmentv1.FulfillmentService_GetRedrive_FullMethodName:    config.ScopeAdmin,
	fulfillmentv1.FulfillmentService_ListRedrives_FullMethodName:  config.ScopeAdmin,
	fulfillmentv1.FulfillmentService_CancelRedrive_FullMethodName: config.ScopeAdmin,
}

// publicServices need no token: health checks and reflection.
var publicServices = []string{"/grpc.health.v1.Health/", "/grpc.reflection."}

// Authenticator checks bearer tokens.
type Authenticator struct {
	// byHash finds a token by the SHA-256 of its value: a map lookup on a
	// hash leaks nothing about the secret through timing.
	byHash map[[sha256.Size]byte]*Principal
}

// NewAuthenticator builds an Authenticator from configured tokens.
func NewAuthenticator(tokens []config.Token) *Authenticator {
	a := &Authenticator{byHash: make(map[[sha256.Size]byte]*Principal, len(tokens))}
	for _, t := range tokens {
		p := &Principal{Name: t.Name, scopes: slices.Clone(t.Scopes)}
		if !slices.Contains(t.Orgs, config.AllOrgs) {
			p.orgs = slices.Clone(t.Orgs)
		}
		a.byHash[sha256.Sum256([]byte(t.Secret))] = p
	}
	return a
}

// authenticate returns the principal for the request's bearer token.
func (a *Authenticator) authenticate(ctx context.Context) (*Principal, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get("authorization")
	switch len(values) {
	case 0:
		return nil, errNoToken
	case 1:
		return a.principalFor(values[0])
	}
	return nil, errTwoTokens
}

var (
	errNoToken = status.Error(codes.Unauthenticated, "missing bearer token: send the header \"Authorization: Bearer <token>\"")
	// Which of two tokens a proxy or a library acts on is theirs to choose:
	// neither is.
	errTwoTokens = status.Error(codes.Unauthenticated, "more than one authorization header: send one \"Authorization: Bearer <token>\"")
)

// principalFor returns the principal of an Authorization header value.
func (a *Authenticator) principalFor(header string) (*Principal, error) {
	if header == "" {
		return nil, errNoToken
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return nil, status.Error(codes.Unauthenticated, "malformed authorization header: expected \"Bearer <token>\"")
	}
	p, found := a.byHash[sha256.Sum256([]byte(token))]
	if !found {
		return nil, status.Error(codes.Unauthenticated, "unknown bearer token")
	}
	return p, nil
}

// UnaryInterceptor authenticates every call and checks the method's scope.
func (a *Authenticator) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	for _, prefix := range publicServices {
		if strings.HasPrefix(info.FullMethod, prefix) {
			return handler(ctx, req)
		}
	}
	p, err := a.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	// The call's log line names its caller, refused or not.
	if rec, ok := ctx.Value(callKey{}).(*callRecord); ok {
		rec.principal = p.Name
	}
	scope, known := methodScopes[info.FullMethod]
	if !known {
		return nil, status.Error(codes.PermissionDenied, "method is not available to tokens")
	}
	if !p.HasScope(scope) {
		return nil, status.Errorf(codes.PermissionDenied, "token %q lacks the %q scope", p.Name, scope)
	}
	return handler(context.WithValue(ctx, principalKey{}, p), req)
}

// StreamInterceptor authenticates every streaming call and checks the
// method's scope, as UnaryInterceptor does.
func (a *Authenticator) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	for _, prefix := range publicServices {
		if strings.HasPrefix(info.FullMethod, prefix) {
			return handler(srv, ss)
		}
	}
	p, err := a.authenticate(ss.Context())
	if err != nil {
		return err
	}
	scope, known := methodScopes[info.FullMethod]
	if !known {
		return status.Error(codes.PermissionDenied, "method is not available to tokens")
	}
	if !p.HasScope(scope) {
		return status.Errorf(codes.PermissionDenied, "token %q lacks the %q scope", p.Name, scope)
	}
	return handler(srv, &principalStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), principalKey{}, p)})
}

// principalStream is a stream whose context carries its caller.
type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *principalStream) Context() context.Context { return s.ctx }

type principalKey struct{}

// principalFrom returns the caller authenticated by the interceptor.
func principalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// requireOrg fails with PERMISSION_DENIED unless the caller may act for
// org, which the caller named.
func requireOrg(p *Principal, org string) error {
	if p.AllowsOrg(org) {
		return nil
	}
	return status.Error(codes.PermissionDenied, fmt.Sprintf("token %q may not act for org %q", p.Name, org))
}

// requireVisible is requireOrg for an object the caller named by its id,
// found in org: one of an org the caller may not act for answers as one
// that does not exist does (missing, the store's error for an id it does
// not hold), so that a token cannot learn which org an id belongs to, or
// how many objects other orgs have.
func requireVisible(p *Principal, org string, missing error) error {
	if p.AllowsOrg(org) {
		return nil
	}
	return status.Error(codes.NotFound, missing.Error())
}
