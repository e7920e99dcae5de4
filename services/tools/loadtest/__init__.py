"""Load tests as users run them: scenarios, `inferq loadgen`, `inferq replay`, `inferq trace export`.

Public surface:

- `loadgen` + `senders`: a trace (a scenario of ``infra/scenarios/*.toml`` turned into arrivals by
  `inferq.tools.traces`) driven into a running pipeline over HTTP ingest or Kafka, with
  request records written by `runs` for reports.
- `source`, `rewrite`, `replay`: recorded requests (a topic time range or a trace file) re-published
  with rewritten ids and shifted times; `export` and `tracefile`: the trace file format.
- `cli.register`: the three subcommands.

Errors (``errors``)::

    LoadtestError
     ├── TimeRangeError    --from/--to unreadable or reversed
     ├── TraceFileError    a file that is not an inferq trace
     └── ReplayError       records not read or not re-published within our bounds
"""
