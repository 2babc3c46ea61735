// Package logging keeps the service's log readable when a dependency fails:
// a slog.Handler that writes every value on one line and lets a repeated
// warning through once per interval, counting the repeats it dropped.
package logging

import (
	"context"
	"hash/maphash"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// SuppressedKey is the attribute of a warning line that counts the records of
// the same cause dropped since that cause's previous line.
const SuppressedKey = "suppressed"

// MaxCauses is how many causes a handler tracks at once; past it, new causes
// share one overflow cause.
const MaxCauses = 1024

// Budget is the most lines a handler writes per interval across all causes,
// at WARN, and again at ERROR and above: a flood of warnings cannot crowd out
// an error.
const Budget = 50

// causeKeys name the attributes whose values tell one cause from another:
// true for free texts (error messages), where a run of digits counts as one
// placeholder, false for names, compared exactly. Per-request values
// (request_id, remote, inbox_id, duration…) are not among them: they differ
// on every line of the same cause.
var causeKeys = map[string]bool{
	"error": true, "err": true, "cause": true, "panic": true,
	"code": false, "status": false, "outcome": false, "method": false, "endpoint": false,
	"queue": false, "destination": false,
}

// Handler wraps a slog.Handler to keep the log readable when something
// fails over and over.
//
// One line per record: the message and every string or error value (also
// inside groups and log valuers) are rewritten to hold no line break or tab:
// lines joined with "; ", blanks collapsed. This applies at every level.
//
// One line per cause and interval: a record at WARN or above belongs to a
// cause made of its level, its message and the values of its cause
// attributes (error, err, cause, panic, code, status, outcome, method,
// endpoint, queue, destination; also when added with WithAttrs, at any
// group depth). In the
// message and in the texts of error, err, cause and panic, a run of digits
// counts as one placeholder, so that addresses, ports and ids inside an error
// text do not make a new cause. A cause writes at most one record per
// interval; the first record written after others of its cause were dropped
// carries SuppressedKey with their number. INFO and DEBUG records are never
// dropped.
//
// Bounds: at most Budget records at WARN, and Budget at ERROR and above, are
// written per interval in all (a record dropped for the budget counts for its cause like any
// other), and at most MaxCauses causes are tracked. When the table is full,
// causes whose interval has passed are forgotten (what they had suppressed
// moves to the overflow cause); new causes that still do not fit share one
// overflow cause, written once per interval among them all.
//
// Handlers derived with WithAttrs and WithGroup share the limits of the
// handler they come from. A Handler is safe for concurrent use.
type Handler struct {
	next   slog.Handler
	lim    *limiter // nil: nothing is rate-limited
	group  string   // open groups, each followed by "."
	causes string   // cause attributes added with WithAttrs, as keyed
}

// NewHandler wraps next, letting each cause of warnings through once per
// interval. An interval of zero or less turns rate limiting off; values are
// still written on one line.
func NewHandler(next slog.Handler, interval time.Duration) *Handler {
	h := &Handler{next: next}
	if interval > 0 {
		h.lim = &limiter{
			interval:  interval,
			budget:    Budget,
			maxCauses: MaxCauses,
			now:       time.Now,
			seed:      maphash.MakeSeed(),
			causes:    make(map[uint64]*cause),
		}
	}
	return h
}

// NewJSONHandler returns a Handler writing JSON lines to w, records below
// level left out, each cause of warnings written once per interval,
// durations in milliseconds (see NewFormatHandler).
func NewJSONHandler(w io.Writer, level slog.Leveler, interval time.Duration) *Handler {
	return NewFormatHandler(w, FormatJSON, level, interval)
}

// Enabled reports whether the wrapped handler handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle writes r on one line, unless r is a warning whose cause already
// wrote a line this interval or the interval's budget is spent.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	suppressed := 0
	if h.lim != nil && r.Level >= slog.LevelWarn {
		ok, n := h.lim.allow(h.key(r), r.Level >= slog.LevelError)
		if !ok {
			return nil
		}
		suppressed = n
	}
	r = oneLineRecord(r)
	if suppressed > 0 {
		r = r.Clone() // r may be the caller's
		r.AddAttrs(slog.Int(SuppressedKey, suppressed))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs returns a Handler whose records carry attrs, on one line; those
// among the cause attributes count for the cause of its warnings.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	flat := make([]slog.Attr, len(attrs))
	var b strings.Builder
	b.WriteString(h.causes)
	for i, a := range attrs {
		v, _ := oneLineValue(a.Value)
		flat[i] = slog.Attr{Key: a.Key, Value: v}
		writeCauses(&b, h.group, flat[i])
	}
	return &Handler{next: h.next.WithAttrs(flat), lim: h.lim, group: h.group, causes: b.String()}
}

// WithGroup returns a Handler that opens group name. The suppressed count
// of a warning logged through it lands in that group too.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &Handler{next: h.next.WithGroup(name), lim: h.lim, group: h.group + name + ".", causes: h.causes}
}

// key hashes the cause of r.
func (h *Handler) key(r slog.Record) uint64 {
	var k maphash.Hash
	k.SetSeed(h.lim.seed)
	k.WriteString(r.Level.String())
	k.WriteByte(0)
	writeShape(&k, r.Message)
	k.WriteByte(0)
	k.WriteString(h.causes)
	r.Attrs(func(a slog.Attr) bool {
		writeCauses(&k, h.group, a)
		return true
	})
	return k.Sum64()
}

// keyWriter is what a cause is written to: a strings.Builder for the
// causes of WithAttrs, a maphash.Hash for a record's key. Neither ever
// returns an error from a write, so writeCauses and writeShape discard them.
type keyWriter interface {
	io.ByteWriter
	io.StringWriter
}

// writeCauses writes the cause attributes in a (a itself, or inside it when
// it is a group) as "group.key=shape" terms.
func writeCauses(w keyWriter, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		if a.Key != "" {
			prefix += a.Key + "."
		}
		for _, ga := range v.Group() {
			writeCauses(w, prefix, ga)
		}
		return
	}
	text, ok := causeKeys[a.Key]
	if !ok {
		return
	}
	_, _ = w.WriteString(prefix)
	_, _ = w.WriteString(a.Key)
	_ = w.WriteByte('=')
	if text {
		writeShape(w, v.String()) // an error's text, for an error
	} else {
		_, _ = w.WriteString(v.String())
	}
	_ = w.WriteByte(0)
}

// writeShape writes s with each run of digits as one '#'.
func writeShape(w keyWriter, s string) {
	digits := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= '0' && c <= '9' {
			if !digits {
				_ = w.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		_ = w.WriteByte(c)
	}
}

// limiter decides which warnings are written. It is shared by a Handler and
// those derived from it.
type limiter struct {
	interval  time.Duration
	budget    int
	maxCauses int
	now       func() time.Time // the clock; tests set it
	seed      maphash.Seed

	mu        sync.Mutex
	causes    map[uint64]*cause
	overflow  cause     // the causes that did not fit in the table
	sweepAt   time.Time // no cause of the table can be forgotten before
	windowEnd time.Time // end of the interval the budget counts
	written   [2]int    // lines of that interval: warnings, errors
}

// cause is one cause of warnings.
type cause struct {
	until      time.Time // no line before
	suppressed int       // records dropped since the last line
}

// allow reports whether a record of cause k (an error or worse, or a
// warning) is written now and, if it is, how many records of k were dropped
// since k's previous line.
func (l *limiter) allow(k uint64, isError bool) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.lookup(k, now)
	if now.Before(c.until) {
		c.suppressed++
		return false, 0
	}
	if !now.Before(l.windowEnd) {
		l.windowEnd, l.written = now.Add(l.interval), [2]int{}
	}
	budget := &l.written[0]
	if isError {
		budget = &l.written[1]
	}
	if *budget >= l.budget {
		c.suppressed++
		return false, 0
	}
	*budget++
	suppressed, c.suppressed, c.until = c.suppressed, 0, now.Add(l.interval)
	return true, suppressed
}

// lookup returns the cause k, adding it when there is room and using the
// overflow cause when there is not.
func (l *limiter) lookup(k uint64, now time.Time) *cause {
	if c, ok := l.causes[k]; ok {
		return c
	}
	if len(l.causes) >= l.maxCauses {
		l.sweep(now)
		if len(l.causes) >= l.maxCauses {
			return &l.overflow
		}
	}
	c := &cause{}
	l.causes[k] = c
	return c
}

// sweep forgets the causes whose interval has passed: their next record
// would be written anyway. What they had suppressed moves to the overflow
// cause, reported with its next line. Until a remaining cause's interval
// passes, there is nothing to forget, so sweep does not look again before.
func (l *limiter) sweep(now time.Time) {
	if now.Before(l.sweepAt) {
		return
	}
	var next time.Time
	for k, c := range l.causes {
		if !now.Before(c.until) {
			l.overflow.suppressed += c.suppressed
			delete(l.causes, k)
			continue
		}
		if next.IsZero() || c.until.Before(next) {
			next = c.until
		}
	}
	l.sweepAt = next
}

// oneLineRecord returns r with its message and values on one line: r itself
// when nothing needs rewriting, else a new record. It looks before it
// copies: nearly every record needs nothing, and a copy of its attributes
// (past the few a record holds inline) is an allocation per line.
func oneLineRecord(r slog.Record) slog.Record {
	msg := oneLine(r.Message)
	if msg == r.Message {
		changed := false
		r.Attrs(func(a slog.Attr) bool {
			_, changed = oneLineValue(a.Value)
			return !changed
		})
		if !changed {
			return r
		}
	}
	out := slog.NewRecord(r.Time, r.Level, msg, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		v, _ := oneLineValue(a.Value)
		out.AddAttrs(slog.Attr{Key: a.Key, Value: v})
		return true
	})
	return out
}

// oneLineValue returns v with errors turned into their text and strings on
// one line, also inside groups and log valuers, and whether that changed v.
func oneLineValue(v slog.Value) (slog.Value, bool) {
	changed := v.Kind() == slog.KindLogValuer
	v = v.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := oneLine(v.String()); s != v.String() {
			return slog.StringValue(s), true
		}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			if s, ok := errorText(err); ok {
				return slog.StringValue(oneLine(s)), true
			}
		}
	case slog.KindGroup:
		attrs := v.Group()
		var out []slog.Attr
		for i, a := range attrs {
			fv, c := oneLineValue(a.Value)
			if c && out == nil {
				out = slices.Clone(attrs)
			}
			if out != nil {
				out[i].Value = fv
			}
		}
		if out != nil {
			return slog.GroupValue(out...), true
		}
	default:
		// Numbers, booleans, times and durations print on one line.
	}
	return v, changed
}

// errorText is err.Error(), unless that panics (a nil pointer in an error
// interface): the wrapped handler then writes err as it does.
func errorText(err error) (text string, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return err.Error(), true
}

// oneLine joins the lines of s with "; " (with a space after a line ending
// in ':' or ';') and collapses each line's blanks, tabs included, into single
// spaces. A string without a line break or tab is returned as is.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\n\r\t\v\f") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for line := range strings.FieldsFuncSeq(s, isLineBreak) {
		first := true
		for word := range strings.FieldsSeq(line) {
			switch {
			case first && b.Len() > 0:
				if last := b.String()[b.Len()-1]; last == ':' || last == ';' {
					b.WriteByte(' ')
				} else {
					b.WriteString("; ")
				}
			case !first:
				b.WriteByte(' ')
			}
			b.WriteString(word)
			first = false
		}
	}
	return b.String()
}

func isLineBreak(r rune) bool { return r == '\n' || r == '\r' || r == '\v' || r == '\f' }
