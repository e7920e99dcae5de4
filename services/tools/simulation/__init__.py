"""`inferq simulate`: what-if runs of an arrival trace under the dispatcher's own scheduling code.

- `simulate`: a discrete-event simulation of arrivals under the dispatcher's own pure scheduler,
  read-ahead and schedule (no Kafka, no wall clock); `simulate.simulate()` is the core, callable
  by benchmarks, and `_engine` its event loop.
- `backend_latency`: each tier's backend call time, from options or from a recorded run.
- `cli` (argument parsing) and `command` (the composition root): reads the trace
  (`inferq.tools.traces.files`), simulates, prints the table and writes the same
  `inferq.tools.report.documents.RunDocument` a recorded run gets, so `inferq report` compares
  a simulation and a real run with the same code.

Errors: a trace that cannot be read is a `inferq.tools.traces.errors.TraceError`; a results file
or document given to `--latency-from`, a `inferq.tools.report.errors.ReportError`.
"""
