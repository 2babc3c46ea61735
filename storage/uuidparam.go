package storage

import (
	"context"
	"errors"

	"github.com/google/uuid"
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
	t := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: uuidCodec{}}
	m.RegisterType(t)
	m.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: &pgtype.ArrayCodec{ElementType: t}})
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
// of a uuid), without allocating. Only the canonical form (8-4-4-4-12 hex
// digits) is taken: PostgreSQL reads a few others, which go as text, and
// uuid.Parse reads some PostgreSQL does not (urn:uuid:), which must not
// pass here.
func (uuidStringPlan) Encode(value any, buf []byte) ([]byte, error) {
	s := value.(string)
	if len(s) != 36 {
		return nil, errNotUUID
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return nil, errNotUUID
	}
	return append(buf, u[:]...), nil
}

var errNotUUID = errors.New("not a uuid in its canonical form")
