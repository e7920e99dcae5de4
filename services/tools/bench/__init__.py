"""Benchmarks, `make bench`:

- `inferq bench scheduling`: the real pipeline on a time-compressed evening peak, one run per
  policy on the same arrival trace, each beside the simulator's prediction;
- `inferq bench fairness`: a steady tenant alone, then with a tenant flooding HIGH and LOW, through
  the real pipeline with a tenants file;
- `inferq bench memory`: the dispatcher's RSS with a million LOW requests waiting in Kafka;
- `inferq bench latency`: time from ingest's 202 to the backend receiving the call, with its steps;
- `inferq bench throughput`: requests/s end to end against a bare confluent-kafka + aiohttp loop;
- `inferq bench replay`: records/s of `inferq replay --speed max`.

Each `inferq bench <name>` is the module `<name>`. Beside `scheduling`: `scheduling_run` (one
policy against the real pipeline, and in the simulator), `scheduling_report` (targets, tables).
Beside `fairness`: `fairness_report`. Shared by both: `scenarios` (their traces, from
`infra/scenarios/bench/*.toml`), `pipeline_run` (one trace through fresh topics and processes),
`load` (posting it to ingest), `summary` (per-tier numbers).
Beside the others: `latency_report`, `throughput_report`. Shared: `kafka` (the
broker, the reply-topic reader), `machine` (what ran it, and the one renderer: every bench's header
line, its markdown tables, its result files), `cpu`, `procs`, `topicio`; `load` posts a trace with
`inferq loadgen`'s pacer and sender. Processes the benchmarks start: `recorder`, `bareloop`, `probe`.

Benchmarks write results to files (`bench-results/*.json`, `*.md`); they are never timed assertions
in tests. The pure parts (the trace, statistics, utilization replay, the reports) are separate
modules so they can be unit-tested without a broker.
"""
