"""Delivery: the callers waiting for an outcome, woken by the reply topic.

A process that holds callers' connections follows its reply topic into a `hub.WaiterHub`: ingest's
chat completions (and the Kafka client) with a `follower.ReplyFollower` (no consumer group, every
partition, from the end); the results service's long poll and event stream with the reader that
stores its results (`inferq.results.consumer`), its one reader. The hub wakes the callers
waiting for that (tenant, request_id): chunks in the order they were written, then the result. The
hub is bounded (waiters, chunks queued per waiter, chunks kept for late joiners) and every wait on it
has a timeout; nothing polls. `sse` holds the Server-Sent Events response both services send, which
frees its waiter as soon as the client goes away.
"""
