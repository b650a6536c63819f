package db

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// BenchmarkUUIDArrayEncode compares encoding a uuid[] of eight ids with
// pgx's default plan (through driver.Valuer) and with uuidCodec.
func BenchmarkUUIDArrayEncode(b *testing.B) {
	ids := make([]uuid.UUID, 8)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	registered := pgtype.NewMap()
	registerUUID(registered)
	for name, m := range map[string]*pgtype.Map{"default": pgtype.NewMap(), "uuidCodec": registered} {
		b.Run(name, func(b *testing.B) {
			var buf []byte
			for b.Loop() {
				var err error
				if buf, err = m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids, buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
