package storage

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// LeasedEvents reads the events of ids leased to owner as processing reads
// them (for tests of the column mapping).
func (s *Store) LeasedEvents(ctx context.Context, ids []int64, owner string) ([]fulfillment.ProviderEvent, error) {
	var evs []fulfillment.ProviderEvent
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		les, err := lockLeasedEvents(ctx, tx, ids, owner)
		for _, le := range les {
			evs = append(evs, le.ev)
		}
		return err
	})
	return evs, err
}
