package loadgen

import (
	"context"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The baseline runs the service's own insert: it stores rows, without an
// error, in the schema the service has now.
func TestBaselineStoresRows(t *testing.T) {
	t.Parallel()
	res, err := RunBaseline(context.Background(), BaselineConfig{
		DatabaseURL:  pgtest.DB(t),
		Clients:      2,
		ClosedConfig: ClosedConfig{Workers: 2, Duration: 300 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK == 0 || res.Errors != 0 {
		t.Errorf("baseline: %d rows, %d errors; want rows and no error", res.OK, res.Errors)
	}
}
