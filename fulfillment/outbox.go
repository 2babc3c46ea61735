package fulfillment

// Topic names what an outbox message announces; it is the "type" of the
// message's body.
type Topic string

// Topics.
const (
	// TopicFulfillmentRequested asks a line's destination to fulfil an
	// external line of a paid order.
	TopicFulfillmentRequested Topic = "fulfillment.requested"
	// TopicOrderFulfilled: every line of the order is fulfilled.
	TopicOrderFulfilled Topic = "order.fulfilled"
	// TopicOrderRefunded: the order's payment was refunded in full.
	TopicOrderRefunded Topic = "order.refunded"
	// TopicOrderOnHold: the order waits for a person (an amount mismatch,
	// a payment after expiry).
	TopicOrderOnHold Topic = "order.on_hold"
)

// OrderTopics are the order events a destination may subscribe to.
var OrderTopics = []Topic{TopicOrderFulfilled, TopicOrderRefunded, TopicOrderOnHold}
