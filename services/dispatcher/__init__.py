"""The dispatcher: takes requests from the tier topics within a shared concurrency budget, calls the
LLM backend and writes each outcome to the reply topic before committing its offset.

Where things are::

    process.py         the process: topics checked, /metrics and /healthz, SIGTERM → request_stop
    bootstrap.py       the composition root: every part built from settings (edges injectable)
    parts.py           the collaborators steps share, grouped (read-ahead, budgets, call policy, clocks)
    run_loop.py        fetch → intake → wake the starter → update pauses; start-up/shutdown order
    intake.py          decode, dead-letter poison, check origin and record rules, expire, admit, rewind
    record_origin.py   whose a record is: its signature must verify for its tenant (else DLQ, no answer)
    record_rules.py    what a record from Kafka may not claim: clamped, refused (DLQ + FAILED) or poison
    pausing.py         back-pressure: full tiers and held-back retry partitions paused
    next_start.py      what starts next (pure; the simulator uses it too)
    starting.py        the starter: NextStart around the token pool; asks preemption when it must wait
    preempting.py      the running calls; cancels the one preemption.py names, hands its request back
    execution.py       the backend call, adaptive feedback, the retry decision, the outcome
    writer.py          produce durably (or to the DLQ when a topic refuses for good), then complete the offset
    checkpoint.py      commits and rebalances (adoption, done-beyond-commit metadata)
    housekeeping.py    expiry/aging/adaptive timer, LOW eviction under pressure
    inflight.py        work that left the read-ahead, drained at shutdown
    consumer.py        the TierConsumer protocol the steps depend on
    kafka_consumer.py  its aiokafka implementation

Pure pieces beside them: ``waiting`` (the read-ahead), ``policies``/``schedule`` (the scheduler),
``forecast`` (lending past the ceilings), ``preemption`` (which lent call gives its slot back),
``call_times`` (call times learned online), ``offsets``, ``retries``, ``adaptive``, ``eviction``,
``poison``, ``models``, ``outcomes``, ``rate_budget`` (the per-minute limits); the token pools in
``tokens``, the rate budget as a start uses it in ``rate_ledger`` (one process's, or the group's in
``shared_rate``); errors in ``errors``.
"""
