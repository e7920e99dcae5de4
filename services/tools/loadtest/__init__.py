"""Load tests as users run them: scenarios, `inferq loadgen`, `inferq replay`, `inferq trace export`.

Public surface:

- `scenario`: TOML scenarios (``infra/scenarios/*.toml``) loaded and validated; `tracegen` turns
  one into a seeded trace of arrivals.
- `loadgen` + `senders`: a trace driven into a running pipeline over HTTP ingest or Kafka, with
  request records written by `runs` for reports.
- `source`, `rewrite`, `replay`: recorded requests (a topic time range or a trace file) re-published
  with rewritten ids and shifted times; `export` and `tracefile`: the trace file format.
- `replay_bench.measure_replay_rate`: records/s of a replay as fast as possible.
- `cli.register`: the three subcommands.

Errors (``errors``)::

    LoadtestError
     ├── ScenarioError     a scenario file that breaks the format (names the key)
     ├── TimeRangeError    --from/--to unreadable or reversed
     ├── TraceFileError    a file that is not an inferq trace
     └── ReplayError       records not read or not re-published within our bounds
"""
