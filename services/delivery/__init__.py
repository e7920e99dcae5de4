"""Delivery: the callers waiting for an outcome, woken by the reply topic.

A process that holds callers' connections (ingest's chat completions, the results service's long poll
and event stream) follows its reply topic with a `follower.ReplyFollower`: no consumer group, every
partition, from the end. Each record it reads goes to a `hub.WaiterHub`, which wakes the callers
waiting for that (tenant, request_id): chunks in the order they were written, then the result. The
hub is bounded (waiters, chunks queued per waiter, chunks kept for late joiners) and every wait on it
has a timeout; nothing polls. `sse` holds the Server-Sent Events response both services send, which
frees its waiter as soon as the client goes away.
"""
