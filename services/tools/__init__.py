"""Tooling: everything that does not run in production. The product (``inferq.ingest``,
``dispatcher``, ``results``, ``messaging``, ``telemetry``, ``serving``) never imports from here;
``tests/unit/test_layout.py`` checks it.

- ``broker``, ``redis``: the local Apache Kafka broker (Maven jars, KRaft) and redis-server, with
  their CLI and test fixtures; ``servercli`` and ``processes`` are what both share.
- ``simbackend``: the simulated OpenAI-compatible LLM backend (concurrency limit, latency, faults).
- ``stack``, ``demo``: the whole pipeline as processes; ``inferq demo``.
- ``loadtest``: ``inferq loadgen`` (a scenario's trace into a running pipeline), trace export, replay.
- ``traces``: the one ``Arrival`` record, scenarios (TOML) and their seeded generator, trace files.
- ``simulation``: ``inferq simulate`` (discrete-event, the dispatcher's own scheduling).
- ``report``: ``inferq report``: per-tier statistics, tables, JSON documents and plots of runs.
- ``measures``: percentiles, makespan and utilization of a run's outcomes.
- ``paths``: where the project root and the built-in scenarios are.
- ``bench``: ``make bench``: scheduling, memory, latency, throughput, replay.
"""
