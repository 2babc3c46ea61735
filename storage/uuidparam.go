package storage

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The statements pass ids as Go strings to uuid[] parameters ($1::uuid[]),
// which pgx prefers to send in binary, and pgx has no binary encoding of a
// string as a uuid: for each such parameter of each statement it built an
// error (formatting the whole array), then encoded the array again as
// text. In a CPU profile of the service under load, building those errors
// alone was 15% of its parameter encoding.
// encodeUUIDStrings teaches a connection's type map to send them as
// binary uuids, parsed in Go; a string that is not a uuid in canonical form
// still fails to encode in binary and goes as text, for PostgreSQL to read
// or refuse as before.
func encodeUUIDStrings(_ context.Context, conn *pgx.Conn) error {
	registerUUIDStrings(conn.TypeMap())
	return nil
}

// registerUUIDStrings replaces m's uuid and uuid[] types by the same with
// uuidCodec.
func registerUUIDStrings(m *pgtype.Map) {
	uuid := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: uuidCodec{}}
	m.RegisterType(uuid)
	m.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: &pgtype.ArrayCodec{ElementType: uuid}})
}

// uuidCodec is pgx's uuid codec, which also encodes a string in binary.
type uuidCodec struct{ pgtype.UUIDCodec }

func (c uuidCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(string); ok && format == pgtype.BinaryFormatCode {
		return uuidStringPlan{}
	}
	return c.UUIDCodec.PlanEncode(m, oid, format, value)
}

type uuidStringPlan struct{}

// Encode appends the 16 bytes of the uuid value spells (the binary format
// of a uuid), without allocating.
func (uuidStringPlan) Encode(value any, buf []byte) ([]byte, error) {
	u, ok := parseUUID(value.(string))
	if !ok {
		return nil, errNotUUID
	}
	return append(buf, u[:]...), nil
}

var errNotUUID = errors.New("not a uuid in its canonical form")

// parseUUID reads a uuid in its canonical form: 32 hex digits in groups
// of 8-4-4-4-12. (PostgreSQL reads more forms; pgx sends those as text.)
func parseUUID(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	j := 0
	for i := 0; i < 36; {
		if s[i] == '-' {
			i++
			continue
		}
		hi, lo := unhex(s[i]), unhex(s[i+1])
		if hi > 15 || lo > 15 {
			return u, false
		}
		u[j] = hi<<4 | lo
		i, j = i+2, j+1
	}
	return u, true
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 255
}
