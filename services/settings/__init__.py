"""What every service's settings share: one name per shared value, the names of earlier versions,
and the table of every setting, read from the pydantic models themselves.

=================  ==========================================================================
``shared``         the values several services read (budget, latency table, models, scenario
                   tiers, the dispatcher group), each declared once under one variable
``renamed``        variables of the previous release still read, with one warning per name
``table``          one row per variable of a settings model: name, type, default, description,
                   secret; rendered for ``--help``, ``inferq config show`` and the docs
``masking``        secrets out of what is printed: `SecretStr`, URL passwords, secret-named keys
=================  ==========================================================================

Prefixes: ``INFERQ_INGEST_``, ``INFERQ_DISPATCHER_``, ``INFERQ_RESULTS_`` for one service's own
settings; a shared block keeps its own (``INFERQ_KAFKA_``, ``INFERQ_REDIS_``, ``INFERQ_TENANTS_``,
``INFERQ_WEBHOOK_``, ``INFERQ_HTTP_``, ``INFERQ_READY_``, ``INFERQ_LOG_``); a value several services
read is bare ``INFERQ_<NAME>`` (`shared`).
"""
