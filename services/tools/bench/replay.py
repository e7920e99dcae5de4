"""`inferq bench replay`: how fast `inferq replay --speed max` re-publishes (target >= 100,000 records/s).

Runs `measure_replay_rate` (services/tools/bench/replay_rate.py) against the bench broker: N requests
of the evening mix are written to a fresh source prefix, then replayed to a fresh target prefix as
fast as possible, three times; the median rate is the figure. Writes `<out>/replay.json` and
`<out>/replay.md` and prints the markdown.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from inferq.tools.bench.kafka import bench_broker
from inferq.tools.bench.machine import header, publish, run_record, table, verdict
from inferq.tools.bench.replay_rate import measure_replay_rate

TARGET_PER_S = 100_000.0
# `measure_replay_rate` returns the median only; its per-run figures are read back from its log lines
# ("run 2: 200,000 records at 123,456 records/s") so the result shows the spread, not one number.
_RUN_LINE = re.compile(r"^run (\d+): ([\d,]+) records at ([\d,]+) records/s$")


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def per_run_rates(lines: list[str]) -> list[float]:
    """The rate of every run, in order, from `measure_replay_rate`'s log lines."""
    found = [m for m in (_RUN_LINE.match(line) for line in lines) if m is not None]
    return [float(_number(m.group(3))) for m in found]


def run(records: int, *, runs: int, out: Path, home: Path) -> int:
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        print(line)

    started = time.monotonic()
    with bench_broker(home, log) as bootstrap:
        median = measure_replay_rate(bootstrap, records=records, runs=runs, log=log)
    took = time.monotonic() - started
    document: dict[str, Any] = {
        **run_record("replay", took),
        "records": records,
        "runs": runs,
        "median_records_per_s": median,
        "rates_records_per_s": per_run_rates(lines),
        "target_records_per_s": TARGET_PER_S,
        "verdict": verdict(median >= TARGET_PER_S),
        "log": lines,
    }
    markdown = render(document)
    publish(out, "replay", document, markdown, indent=2)
    return 0


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def render(document: dict[str, Any]) -> str:
    rates = document["rates_records_per_s"]
    fill = next((line for line in document["log"] if line.startswith("filled ")), None)
    return "\n".join(
        [
            "# Replay benchmark",
            "",
            header(document),
            "",
            f"{document['records']:,} requests (Avro, the evening mix of tiers, keyed by session) in a fresh "
            "source prefix, replayed as fast as possible (`inferq replay --speed max`: read, rewrite, "
            f"produce, final flush with every record acknowledged) to a fresh target prefix, "
            f"{document['runs']} times." + (f" Source {fill}." if fill else ""),
            "",
            *table(
                ("", "records/s"),
                [
                    *((f"run {i}", _rate(rate)) for i, rate in enumerate(rates, start=1)),
                    ("**median**", f"**{_rate(document['median_records_per_s'])}**"),
                ],
            ),
            "",
            f"Target: median >= {_rate(document['target_records_per_s'])} records/s: "
            f"**{document['verdict']}**.",
            "",
        ]
    )
