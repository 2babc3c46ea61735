package loadgen

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The baseline runs the service's own insert: it stores rows, without an
// error, in the schema the service has now.
func TestBaselineStoresRows(t *testing.T) {
	t.Parallel()
	res, err := RunBaseline(context.Background(), BaselineConfig{
		DatabaseURL:  pgtest.DB(t),
		Clients:      2,
		ClosedConfig: ClosedConfig{Workers: 2, Duration: 2 * time.Second}, // rows even on a loaded machine
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK == 0 || res.Errors != 0 {
		t.Errorf("baseline: %d rows, %d errors; want rows and no error", res.OK, res.Errors)
	}
}

// A summary written to a report reads back as written.
func TestSummaryJSONRoundTrip(t *testing.T) {
	t.Parallel()
	in := Summary{N: 3, Mean: 1500 * time.Microsecond, P50: 1234 * time.Microsecond, P90: 2 * time.Millisecond,
		P99: 25*time.Millisecond + 7*time.Microsecond, P999: 30 * time.Millisecond, Max: time.Second}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Summary
	if err := json.Unmarshal(data, &out); err != nil || out != in {
		t.Errorf("read back %+v, %v; want %+v", out, err, in)
	}
}
