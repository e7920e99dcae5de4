"""The batch producer: ``inferq batch submit FILE.jsonl`` and ``inferq batch status``.

A user-facing command built on the client library (`inferq.client`), in the product beside it:
one request per line of a JSONL file, sent at a chosen rate over HTTP or Kafka, every outcome
written to a results file, resumable after Ctrl-C or a crash without sending anything twice.

- `lines`: the file's lines as submissions, each with a request id derived from the batch and the
  line number, and each checked with ingest's own rules before anything is sent;
- `ledger`: the results file and its journal of accepted requests: what a rerun skips and waits for;
- `runner`: the submit and wait loops, pacing, 429 Retry-After;
- `progress`: the progress bar;
- `cli`: the subcommands.
"""
