package storage

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// With uuidCodec, ids given as strings encode in binary for uuid and
// uuid[] parameters, as the bytes of the uuid; strings that are not uuids
// still fail to (and pgx then sends them as text, for PostgreSQL to
// refuse); strings for text parameters are untouched.
func TestUUIDStringsEncodeInBinary(t *testing.T) {
	t.Parallel()
	m := pgtype.NewMap()
	registerUUIDStrings(m)
	const id = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
	one, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, id, nil)
	if err != nil || len(one) != 16 || one[0] != 0x6b || one[15] != 0xc8 {
		t.Fatalf("uuid: % x, %v; want the 16 bytes of %s", one, err, id)
	}
	arr, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, []string{id, id}, nil)
	if err != nil {
		t.Fatalf("uuid[]: %v", err)
	}
	var back []pgtype.UUID
	if err := m.Scan(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, arr, &back); err != nil || len(back) != 2 || back[1].String() != id {
		t.Fatalf("uuid[] read back as %v, %v; want [%s %s]", back, err, id, id)
	}
	for _, bad := range []string{"not-a-uuid", "6ba7b810-9dad-11d1-80b4-00c04fd430cg", "6ba7b810x9dad-11d1-80b4-00c04fd430c8", id + "0",
		"urn:uuid:" + id, "{" + id + "}", "6ba7b8109dad11d180b400c04fd430c8"} {
		if b, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, []string{bad}, nil); err == nil {
			t.Errorf("%q encoded in binary as % x", bad, b)
		}
	}
	if upper, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, "6BA7B810-9DAD-11D1-80B4-00C04FD430C8", nil); err != nil || !bytes.Equal(upper, one) {
		t.Errorf("upper case: % x, %v; want % x", upper, err, one)
	}
	text, err := m.Encode(pgtype.TextOID, pgtype.BinaryFormatCode, id, nil)
	if err != nil || string(text) != id {
		t.Errorf("text: %q, %v; want %q", text, err, id)
	}
	for _, v := range []any{1.5, "1.5"} {
		if b, err := m.Encode(pgtype.NumericOID, pgtype.BinaryFormatCode, v, nil); err == nil && len(b) == 16 {
			t.Errorf("numeric %v encoded as 16 bytes: % x", v, b)
		}
	}
	var u pgtype.UUID
	if err := m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, one, &u); err != nil || u.String() != id {
		t.Errorf("uuid read back as %v, %v; want %s", u, err, id)
	}
}
