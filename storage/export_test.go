package storage

import "time"

// Statement is one SQL statement with arguments, and the number of rows it
// needs to handle.
type Statement struct {
	Name string
	SQL  string
	Args []any
	Need int
}

// QueueStatementsForTest returns the inbox's reclaim (of 40 leased events)
// and claim (a batch of 16) statements, which run all the time.
func QueueStatementsForTest() []Statement {
	return []Statement{
		{"reclaim", inboxQueue.reclaimSQL, nil, 40},
		{"claim", inboxQueue.claimSQL, []any{"owner", time.Minute, 16, 10}, 16},
	}
}
