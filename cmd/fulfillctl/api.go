package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// call dials fulfillmentd and runs fn with the client and a context
// carrying the token. Every command that calls the API goes through it: a
// gRPC status fn returns becomes an rpcError, one line, "NOT_FOUND: what
// the service said", followed by what to do when the code says it (a
// token without the scope, a service that does not answer).
func (c *conn) call(ctx context.Context, fn func(context.Context, fulfillmentv1.FulfillmentServiceClient) error) error {
	client, ctx, done, err := c.client(ctx)
	if err != nil {
		return err
	}
	defer done()
	err = apiError(fn(ctx, client))
	if e, ok := errors.AsType[*rpcError](err); ok && e.hint == "" {
		e.hint = c.hint(e.st)
	}
	return err
}

// hint says what to do about an API error, or "" when the service's
// message is all there is to say.
func (c *conn) hint(st *status.Status) string {
	switch st.Code() {
	case codes.Unauthenticated:
		return "pass a token the service knows: --token-file FILE, $FULFILLCTL_TOKEN_FILE or $FULFILLCTL_TOKEN"
	case codes.PermissionDenied:
		return "use a token with that scope and org (--token-file), or ask an admin for one"
	case codes.Unavailable:
		if databaseDown(st) {
			return "fulfillmentd answered, but its database does not: its /readyz and its log ('database unreachable') say more; retry once the database is back"
		}
		if httpAnswered(st) {
			return fmt.Sprintf("%s answers HTTP/1.1, not gRPC: is FULFILLCTL_ADDR (--addr) the gRPC address (not the REST/HTTP one)?", c.addr)
		}
		return fmt.Sprintf("check that fulfillmentd is running and reachable at %s (--addr, $FULFILLCTL_ADDR)", c.addr)
	case codes.DeadlineExceeded:
		return "the service did not answer in time: try again"
	default:
		// The service's message names what to change (an argument, a
		// state) or there is nothing to do but report it.
		return ""
	}
}

// httpAnswered says whether st is the UNAVAILABLE of a server that
// answered gRPC's HTTP/2 preface in HTTP/1.1: the REST or webhook listener
// (or another HTTP server) at the gRPC address. gRPC reads its answer as an
// HTTP/2 frame: "http2: frame too large", which Go's HTTP/2 framer says
// "looked like an HTTP/1.1 header" when it did.
func httpAnswered(st *status.Status) bool {
	msg := st.Message()
	return strings.Contains(msg, "http2: frame too large") || strings.Contains(msg, "HTTP/1.1 header")
}

// databaseDown says whether st is the service's UNAVAILABLE for want of its
// database (a google.rpc.ErrorInfo with that reason), not a service that
// cannot be reached.
func databaseDown(st *status.Status) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == fulfillment.ReasonDatabaseUnavailable {
			return true
		}
	}
	return false
}

// newIDCmd completes cmd, a command taking one id, with --json and a RunE
// that calls do and prints what it returns: with text, or as JSON. The line
// note returns, when note is not nil, goes to stderr.
func newIDCmd[M proto.Message](c *conn, cmd *cobra.Command,
	do func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (M, error),
	text func(io.Writer, M) error, note func(M) string) *cobra.Command {
	var asJSON bool
	cmd.Args = cobra.ExactArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var m M
		err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
			var err error
			m, err = do(ctx, client, args[0])
			return err
		})
		if err != nil {
			return err
		}
		if note != nil {
			_, _ = fmt.Fprintln(cmd.ErrOrStderr(), note(m))
		}
		if asJSON {
			return printJSON(cmd.OutOrStdout(), m)
		}
		return text(cmd.OutOrStdout(), m)
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

// deprecatedName keeps old, a former name of cmd's flag name, working: a
// hidden flag that sets name (marked changed, so that a required name is
// satisfied by old) and says "Flag --old has been deprecated, use --name"
// on stderr.
func deprecatedName(cmd *cobra.Command, old, name string) {
	f := cmd.Flags()
	target := f.Lookup(name)
	f.Var(&aliasValue{cmd: cmd, name: name}, old, target.Usage)
	_ = f.MarkDeprecated(old, "use --"+name)
}

// aliasValue is the value of a deprecated flag name: it is its new flag's.
type aliasValue struct {
	cmd  *cobra.Command
	name string
}

func (a *aliasValue) Set(v string) error { return a.cmd.Flags().Set(a.name, v) }
func (a *aliasValue) String() string     { return a.cmd.Flags().Lookup(a.name).Value.String() }
func (a *aliasValue) Type() string       { return a.cmd.Flags().Lookup(a.name).Value.Type() }

// rpcError is a gRPC status shown as one line. It keeps the status, so
// that status.Code still reads it.
type rpcError struct {
	st   *status.Status
	hint string // what to do, when the code says it (conn.hint)
}

// apiError turns a gRPC status error into an rpcError; other errors (and
// nil) are returned as they are.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*rpcError](err); ok {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	return &rpcError{st: st}
}

// Error is the status code as the API documentation writes it, then the
// message on one line, e.g. `NOT_FOUND: destination "x" is not
// configured`, then "; " and the hint when there is one. A message that
// repeats the code in words ("invalid argument: …") does not say it twice.
func (e *rpcError) Error() string {
	code := codeName(e.st.Code())
	msg := oneLine(e.st.Message())
	words := strings.ToLower(strings.ReplaceAll(code, "_", " ")) + ": "
	if len(msg) >= len(words) && strings.EqualFold(msg[:len(words)], words) {
		msg = msg[len(words):]
	}
	if e.hint != "" {
		msg += "; " + e.hint
	}
	return code + ": " + msg
}

// GRPCStatus lets status.FromError and status.Code read e.
func (e *rpcError) GRPCStatus() *status.Status { return e.st }

// codeName writes a gRPC code as the API documentation does:
// codes.NotFound is "NOT_FOUND".
func codeName(c codes.Code) string {
	var b strings.Builder
	prev := ' '
	for _, r := range c.String() {
		if unicode.IsUpper(r) && unicode.IsLower(prev) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
		prev = r
	}
	return b.String()
}

// oneLine returns s with every control character (newlines and tabs
// included) turned into a space: text from the service stays on its line
// and in its column.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// moreFollow says that more of what a listing lists follow, and how to
// read on: the same command with --page-token token. A time flag given as
// a duration means another time at each call, and the token holds the
// listing to its filters: the hint names the time it meant, to give in its
// place. times are the time flags, as flag name, value given, value read.
func moreFollow(w io.Writer, what, token string, times ...timeArg) {
	var flags strings.Builder
	for _, f := range times {
		if _, err := time.Parse(time.RFC3339, f.given); f.at == nil || err == nil {
			continue // unset, or a time: the same when given again
		}
		fmt.Fprintf(&flags, " %s %s (what %s %s meant)", f.name, f.at.AsTime().UTC().Format(time.RFC3339Nano), f.name, f.given)
	}
	_, _ = fmt.Fprintf(w, "more %s follow: add --page-token %s%s to continue, or raise --limit\n", what, token, flags.String())
}

// timeArg is a time flag: its name, the value given and the time read.
type timeArg struct {
	name, given string
	at          *timestamppb.Timestamp
}

// printNone writes the one line every command prints for an empty result
// (in text; --json prints the empty answer): "no WHAT match", and the
// detail in parentheses when there is one.
func printNone(w io.Writer, what, detail string) error {
	line := "no " + what + " match"
	if detail != "" {
		line += " (" + detail + ")"
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// table writes aligned columns, two spaces apart.
type table struct{ tw *tabwriter.Writer }

// newTable starts a table on w with a header row, unless header is empty.
func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

// row adds a row; an empty cell shows as "-".
func (t *table) row(cells ...string) {
	for i, c := range cells {
		c = oneLine(c)
		if c == "" {
			c = "-"
		}
		if i > 0 {
			_, _ = io.WriteString(t.tw, "\t")
		}
		_, _ = io.WriteString(t.tw, c)
	}
	_, _ = io.WriteString(t.tw, "\n")
}

// flush writes the table out; the error is the first write's that failed.
func (t *table) flush() error { return t.tw.Flush() }

// timeText shows a timestamp in UTC, to the second, e.g.
// "2025-06-01T14:03:07Z"; "" when it is not set.
func timeText(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// yesNo shows a bool as "yes" or "no".
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// maxPageSize is the largest page the service serves.
const maxPageSize = 500

// collectPages gathers up to limit items (0: all) of a listing, page by
// page from pageToken ("" for the first): fetch reads one page of at most
// size items from a token. It returns the items and the token of what
// follows them, "" when nothing does.
func collectPages[T any](limit int, pageToken string,
	fetch func(size int32, token string) ([]T, string, error)) (all []T, next string, err error) {
	next = pageToken
	for {
		size := maxPageSize
		if limit > 0 {
			size = min(size, limit-len(all))
		}
		var page []T
		page, next, err = fetch(int32(size), next)
		if err != nil {
			return nil, "", err
		}
		all = append(all, page...)
		// An empty page ends it too: a service that sent one with a token
		// would otherwise be asked again forever.
		if next == "" || len(page) == 0 || (limit > 0 && len(all) >= limit) {
			return all, next, nil
		}
	}
}
