"""Arrival traces: what arrives at the queue, and when.

- `files`: trace files read for `inferq simulate` and `inferq report` (JSONL of arrivals or
  load-generator records, Avro containers of requests).

Errors (``errors``)::

    TracesError
     └── TraceError      a trace file that cannot be read (names the file and line)
"""
