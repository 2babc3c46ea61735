package storage

import (
	"strconv"
	"strings"
)

// where builds the WHERE clause of a listing from optional filters, with
// numbered placeholders.
type where struct {
	conds []string
	args  []any
}

// arg adds a query argument and returns its placeholder.
func (w *where) arg(v any) string {
	w.args = append(w.args, v)
	return "$" + strconv.Itoa(len(w.args))
}

// eq adds "column = value" unless value is empty.
func (w *where) eq(column, value string) {
	if value != "" {
		w.add(column + " = " + w.arg(value))
	}
}

// among adds "column = ANY(values)" unless values is nil (no restriction;
// an empty list matches nothing): the orgs a caller may see.
func (w *where) among(column string, values []string) {
	if values != nil {
		w.add(column + " = ANY(" + w.arg(values) + ")")
	}
}

// uuidEq adds "column = value::uuid" unless value is empty.
func (w *where) uuidEq(column, value string) {
	if value != "" {
		w.add(column + " = " + w.arg(value) + "::uuid")
	}
}

// below adds "column < id" unless id is 0: the page after a cursor, newest
// first.
func (w *where) below(column string, id int64) {
	if id != 0 {
		w.add(column + " < " + w.arg(id))
	}
}

// add adds a condition built with arg.
func (w *where) add(cond string) { w.conds = append(w.conds, cond) }

// sql returns " WHERE a AND b", or "" without conditions.
func (w *where) sql() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}
