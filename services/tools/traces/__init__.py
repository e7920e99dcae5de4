"""Arrival traces: what arrives at the queue, and when. One record, one generator, one reader.

- `arrival.Arrival`: one request of a trace; what `inferq loadgen` and the scheduling benchmark
  send, what `inferq simulate` replays and what `inferq report` counts as submitted.
- `scenario` (with `tomlread`): TOML scenarios (``infra/scenarios/*.toml``) loaded and validated,
  every refusal naming its key; `generator.generate` turns one into a seeded trace.
- `files`: trace files read for `inferq simulate` and `inferq report` (JSONL of arrivals or of a
  load generator's records, Avro containers of requests).

Errors (``errors``)::

    TracesError
     ├── ScenarioError   a scenario file that breaks the format (names the key)
     └── TraceError      a trace file that cannot be read (names the file and line)
"""
