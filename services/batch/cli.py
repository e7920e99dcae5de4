"""``inferq batch submit FILE.jsonl --out results.jsonl`` and ``inferq batch status FILE.jsonl --out
results.jsonl``: see `inferq.batch` and the README's "Batch" section."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections import Counter
from pathlib import Path

from inferq.batch.ledger import BatchState, Ledger, LedgerError, read_state
from inferq.batch.lines import BatchLine, batch_key, duplicate_ids, read_lines
from inferq.batch.progress import Progress
from inferq.batch.runner import BatchAbortedError, BatchRun, Pacing, parse_rate
from inferq.client.transport import Transport

EXIT_BAD_LINE = 2
EXIT_INTERRUPTED = 130


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("batch", help="send a JSONL file of requests; resumable, with progress")
    commands = parser.add_subparsers(dest="batch_command", required=True)
    submit = commands.add_parser("submit", help="send every line, write every outcome to --out")
    status = commands.add_parser("status", help="where a batch stands (reads the files only)")
    for command in (submit, status):
        command.add_argument("file", type=Path, help="one JSON request per line (messages or prompt)")
        command.add_argument("--out", type=Path, required=True, help="the results file (JSONL)")
    submit.add_argument("--scenario", default="batch", help="for lines that name none (default: batch)")
    submit.add_argument(
        "--rate", type=parse_rate, default=None, help="at most this many, e.g. 20/s or 600/min"
    )
    submit.add_argument("--via", choices=("http", "kafka"), default="http")
    submit.add_argument("--on-bad-line", choices=("stop", "skip"), default="stop")
    submit.add_argument(
        "--batch-id", default=None, help="names the batch in request ids (default: the file's hash)"
    )
    submit.add_argument("--max-waiting", type=int, default=200, help="outcomes waited for at once")
    submit.add_argument("--senders", type=int, default=4, help="requests being sent at once (default 4)")
    submit.add_argument("--no-progress", action="store_true", help="no progress bar")
    http = submit.add_argument_group("--via http")
    http.add_argument("--url", default=os.environ.get("INFERQ_URL", "http://127.0.0.1:8700"), help="ingest")
    http.add_argument(
        "--results-url", default=os.environ.get("INFERQ_RESULTS_URL", "http://127.0.0.1:8701"), help="results"
    )
    http.add_argument("--tenant", default=None, help="open mode only; with a key the key names the tenant")
    kafka = submit.add_argument_group("--via kafka (Kafka settings from INFERQ_KAFKA_*)")
    kafka.add_argument("--region", default=None, help="reply topic <prefix>.results.<region>")
    kafka.add_argument(
        "--kafka-tenant",
        default="default",
        help="the tenant the records name; they are signed with its record key from $INFERQ_RECORD_KEY",
    )
    submit.set_defaults(func=_submit)
    status.set_defaults(func=_status)


# A resumed Kafka batch follows the reply topic from this long before its oldest waiting request
# was accepted (clocks of the machines involved may differ by this much).
FOLLOW_MARGIN_MS = 60_000


def _transport(args: argparse.Namespace, state: BatchState) -> Transport:
    if args.via == "kafka":
        from inferq.client.kafka import DEFAULT_MAX_PENDING, KafkaTransport
        from inferq.messaging.kafka_config import KafkaSettings

        since_ms = state.waiting_since_ms()
        return KafkaTransport(
            KafkaSettings(),
            tenant=args.kafka_tenant,
            region=args.region,
            follow_from_ms=None if since_ms is None else max(since_ms - FOLLOW_MARGIN_MS, 0),
            # Every waiting request is held from the start, and the sending keeps that many more.
            max_pending=DEFAULT_MAX_PENDING + len(state.waiting),
        )
    from inferq.client.http import HttpTransport

    # The key from the environment only: a command line is visible to every user of the machine.
    return HttpTransport(
        args.url, os.environ.get("INFERQ_API_KEY"), results_url=args.results_url, tenant=args.tenant
    )


def bad_lines(lines: list[BatchLine]) -> list[BatchLine]:
    """Lines that are not requests, and lines repeating an earlier line's request id."""
    repeated = duplicate_ids(lines)
    bad = []
    for line in lines:
        if line.problem is not None:
            bad.append(line)
        elif line.number in repeated:
            problem = f"request_id {line.request_id!r} is line {repeated[line.number]}'s too"
            bad.append(BatchLine(line.number, line.request_id, problem=problem))
    return bad


def _submit(args: argparse.Namespace) -> int:
    path: Path = args.file
    key = batch_key(path, args.batch_id)
    lines = list(read_lines(path, key=key, scenario=args.scenario))
    bad = bad_lines(lines)
    try:
        ledger = Ledger(args.out, key)
    except LedgerError as exc:
        print(f"inferq batch: {exc}", file=sys.stderr)
        return 1
    try:
        fresh_bad = [b for b in bad if b.number not in ledger.state.outcomes]
        for line in fresh_bad:
            print(f"{path}:{line.number}: {line.problem}", file=sys.stderr)
        if fresh_bad and args.on_bad_line == "stop":
            print(
                f"inferq batch: {len(fresh_bad)} bad line(s); nothing sent. Fix them, or --on-bad-line skip",
                file=sys.stderr,
            )
            return EXIT_BAD_LINE
        for line in fresh_bad:
            ledger.outcome(line.number, line.request_id, "BAD_LINE", error=line.problem)
        bad_numbers = {b.number for b in bad}
        good = [line for line in lines if line.number not in bad_numbers]
        state = ledger.state
        progress = None
        if not args.no_progress:
            progress = Progress(
                len(lines),
                already_done=Counter(state.outcomes.values()),
                already_submitted=len(state.accepted),
            )
        run = BatchRun(
            _transport(args, state),
            ledger,
            good,
            pacing=Pacing(rate_per_s=args.rate),
            max_waiting=max(1, args.max_waiting),
            senders=args.senders,
            stop_on_invalid=args.on_bad_line == "stop",
            progress=progress,
        )
        try:
            asyncio.run(_run(run))
        except KeyboardInterrupt:
            print("\ninferq batch: interrupted; run the same command again to resume", file=sys.stderr)
            return EXIT_INTERRUPTED
        except BatchAbortedError as exc:
            print(f"inferq batch: stopped: {exc}", file=sys.stderr)
            return EXIT_BAD_LINE
        finally:
            if progress is not None:
                progress.close()
        print(_status_text(len(lines), args.out), file=sys.stderr)
        return 0
    finally:
        ledger.close()


async def _run(run: BatchRun) -> None:
    try:
        await run.run()
    finally:
        await run.transport.aclose()


def _status_text(total: int, out: Path) -> str:
    state = read_state(out)
    done = len(state.outcomes)
    waiting = len(state.waiting)
    by_status = " ".join(f"{s}={n}" for s, n in state.counts().items()) or "none"
    return (
        f"{total} lines: {done} done ({by_status}), {waiting} accepted and waiting, "
        f"{max(total - done - waiting, 0)} not sent yet"
    )


def _status(args: argparse.Namespace) -> int:
    try:
        with args.file.open("rb") as f:
            total = sum(1 for raw in f if raw.strip())
        print(_status_text(total, args.out))
    except (OSError, LedgerError) as exc:
        print(f"inferq batch: {exc}", file=sys.stderr)
        return 1
    return 0
