"""Benchmarks: `inferq bench scheduling` (the real pipeline on a time-compressed evening peak, one run
per policy on the same arrival trace) and `inferq bench memory` (the dispatcher's RSS with a million
LOW requests waiting in Kafka).

Benchmarks write results to files (`bench-results/*.json`, `*.md`); they are never timed assertions
in tests. The pure parts (trace generation, statistics, utilization replay, the report) are
separate modules so they can be unit-tested without a broker.
"""
