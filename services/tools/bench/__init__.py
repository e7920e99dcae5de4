"""Benchmarks, `make bench`:

- `inferq bench scheduling`: the real pipeline on a time-compressed evening peak, one run per
  policy on the same arrival trace, each beside the simulator's prediction;
- `inferq bench memory`: the dispatcher's RSS with a million LOW requests waiting in Kafka;
- `inferq bench latency`: time from ingest's 202 to the backend receiving the call, with its steps;
- `inferq bench throughput`: requests/s end to end against a bare confluent-kafka + aiohttp loop;
- `inferq bench replay`: records/s of `inferq replay --speed max`.

Benchmarks write results to files (`bench-results/*.json`, `*.md`); they are never timed assertions
in tests. The pure parts (trace generation, statistics, utilization replay, the report) are
separate modules so they can be unit-tested without a broker.
"""
