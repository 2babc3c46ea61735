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

// add adds a condition built with arg.
func (w *where) add(cond string) { w.conds = append(w.conds, cond) }

// sql returns " WHERE a AND b", or "" without conditions.
func (w *where) sql() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}
