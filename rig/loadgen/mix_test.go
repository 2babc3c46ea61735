package loadgen

import (
	"fmt"
	"sync"
	"testing"
)

// A mix that stops when its orders are exhausted hands out every order's
// confirmation once, however many senders draw from it at once: a call
// that drew the last order returns it even when another call found none
// left meanwhile (which once dropped that order in the bench's outbox
// fill: "3999 of 4000 orders have a pending message").
func TestMixStopWhenExhaustedHandsOutEveryOrder(t *testing.T) {
	t.Parallel()
	src := YolfiSource{Org: "org_t", Live: true, Secret: []byte("s")}
	for round := range 200 {
		orders := make([]Order, 50)
		for i := range orders {
			orders[i] = Order{MerchantOrderID: fmt.Sprintf("m-%d-%d", round, i)}
		}
		m := NewMix(src, orders, 0, 0)
		m.StopWhenExhausted = true
		var (
			mu   sync.Mutex
			seen = map[string]int{}
			wg   sync.WaitGroup
		)
		for range 8 {
			wg.Go(func() {
				for {
					ev, k, ok := m.Next()
					if !ok {
						return
					}
					if k != KindNew {
						t.Errorf("drew a %v event from a mix of new ones only", k)
						return
					}
					mu.Lock()
					seen[ev.MerchantOrderID]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(seen) != len(orders) {
			t.Fatalf("round %d: %d of %d orders handed out", round, len(seen), len(orders))
		}
		for mo, n := range seen {
			if n != 1 {
				t.Fatalf("round %d: %s handed out %d times", round, mo, n)
			}
		}
	}
}
