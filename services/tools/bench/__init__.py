"""Benchmarks, `make bench`: each `inferq bench <name>` is the module `<name>` (`cluster-chaos`:
`cluster_chaos`), which writes `bench-results/<name>.json` and `.md` and prints the markdown:

- `scheduling`: every policy on one time-compressed evening peak through the real pipeline, beside
  the simulator's prediction; with `scheduling_run` (one policy: in the pipeline and in the
  simulator) and `scheduling_report` (targets, tables);
- `fairness`: a steady tenant alone, then with a tenant flooding HIGH and LOW; with `fairness_report`;
- `memory`: the dispatcher's RSS with a million LOW requests waiting in Kafka;
- `latency`: time from ingest's 202 to the backend receiving the call, by step; with `latency_report`;
- `delivery`: chat completions direct and through inferq at 20 and 200 calls/s; with
  `delivery_report` (per phase), `delivery_verdicts` (CPU per call, medians, targets),
  `delivery_broker` (the broker's pid, for its CPU) and `delivery_floor` (one Kafka trip, and the
  floor of a call from it);
- `throughput`: requests/s of dispatcher groups against a bare loop, tracing on and off; with
  `throughput_report` and `tracing_cost`;
- `replay`: records/s of `inferq replay --speed max`;
- `tokens`, `fallback`, `takeover`, `cluster_chaos`: with `tokens_report`, `fallback_report`.

Shared: `scenarios` (the scheduling and fairness traces, from `infra/scenarios/bench/*.toml`),
`pipeline_run` (one trace posted through fresh topics and processes), `summary` (per-tier figures),
`kafka` (the broker, fresh topics, reading and loading topics), `procs` (the processes a bench
starts beside a pipeline), `cpu` (CPU seconds over a window), `machine` (what ran it, and the one
renderer: every bench's header line, its tables, its result files). Processes the benches start:
`recorder`, `bareloop`, `probe` (`inferq bench recorder|bareloop|probe-dispatcher`).

Benchmarks are never timed assertions in tests; the pure parts (traces, statistics, reports) are
unit-tested without a broker.
"""
