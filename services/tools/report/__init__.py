"""`inferq report`: per-tier statistics, time series, tables and plots of recorded (or simulated) runs.

A recorded run is read from the results topic (`results_source`, the Kafka edge) and, when the load
generator left them, its request records (`inferq.tools.traces.files`); a simulated one from the
JSON document `inferq simulate --json` wrote. Both become a `documents.RunDocument` (outcomes +
summary). Pure modules: `stats` (per-tier numbers), `timeseries` (tokens in use, backlog,
utilization), `table` (the terminal table), `documents` (the JSON format), `tenants` (one tenant's
part, `--tenant`); edges: `results_source` (Kafka), `plots` (matplotlib), `cli` with `command`.

Errors (``errors``)::

    ReportError
     ├── DocumentError   a document or results file that cannot be read
     └── SourceError     the results topic could not be read
"""
