-- The W3C traceparent of the call that stored an inbox event, so that its
-- processing, later and in another goroutine or process, joins that trace.
-- NULL when the call was not traced (tracing off).
ALTER TABLE inbox_events ADD COLUMN trace_parent text;

---- create above / drop below ----

ALTER TABLE inbox_events DROP COLUMN trace_parent;
