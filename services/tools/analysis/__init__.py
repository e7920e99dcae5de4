"""What-if and after-the-fact analysis: `inferq simulate` and `inferq report`.

- `simulate`: a discrete-event simulation of an arrival trace under the dispatcher's own pure
  scheduler, waiting room and schedule (no Kafka, no wall clock). `simulate.simulate()` is the core,
  callable by benchmarks.
- `report`: per-tier statistics, time series and plots of a recorded run, read from the results
  topic, side by side with other runs or with simulations.

Both produce the same `documents.RunDocument` (outcomes + summary), so a simulation and a real run
are compared by the same code. Pure modules: `trace` (parsing), `simulate` (its event loop in
`_engine`), `stats`, `timeseries`, `table`, `documents`, `latency`; edges: `results_source`
(Kafka), `plots` (matplotlib), `cli` with `simulate_cmd` and `report_cmd`.

Errors (``errors``)::

    AnalysisError
     ├── TraceError     a trace or results file that cannot be read
     └── SourceError    the results topic could not be read
"""
