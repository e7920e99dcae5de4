"""What the benchmark ran on: recorded with every result, since numbers mean little without it."""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inferq.tools.bench.kafka import kafka_version
from inferq.tools.paths import find_project_root


def _git(*args: str) -> str:
    """Read-only git queries, so a result names the code it measured; "" when git cannot answer."""
    try:
        done = subprocess.run(  # noqa: S603 - fixed arguments, no shell
            ["git", *args],  # noqa: S607 - git from PATH, as a developer runs it
            cwd=find_project_root(),
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def machine() -> dict[str, object]:
    load1, load5, _ = os.getloadavg()
    return {
        "commit": _git("rev-parse", "--short", "HEAD"),
        # Other engineers edit the tree while benchmarks run: say whether it differed from the commit.
        "uncommitted_changes_in_services": bool(_git("status", "--porcelain", "--", "services")),
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "kafka": "external broker"
        if os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        else kafka_version(find_project_root()),
        # Other work on the machine (other test suites) skews a 2-core benchmark: say how busy it was.
        "load_average_1m_5m": [round(load1, 2), round(load5, 2)],
    }


def results_dir(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    return out


def command_line(kind: str) -> str:
    """The command as typed, from `inferq bench <kind>` on (however the program was launched)."""
    argv = sys.argv
    return "inferq bench " + (shlex.join(argv[argv.index(kind) :]) if kind in argv else kind)


def code_line(m: dict[str, object]) -> str:
    dirty = " with uncommitted changes in services/" if m.get("uncommitted_changes_in_services") else ""
    return f"code at commit {m.get('commit') or 'unknown'}{dirty}"


def header(document: Mapping[str, Any], *, python: bool = True, kafka: str = "", in_all: bool = True) -> str:
    """The line every bench's markdown opens with: the command, when, on what, at which code.
    `kafka` follows the broker's version (the cluster's shape); `in_all` adds the run's seconds."""
    m = document["machine"]
    py = f"Python {m['python']}, " if python else ""
    took = f"; {document['seconds']:.0f} s in all" if in_all else ""
    return (
        f"`{document['command']}` on {m['date_utc']} UTC: {m['cores']} cores, {py}Kafka {m['kafka']}{kafka}, "
        f"load average at the end {m['load_average_1m_5m']}; {code_line(m)}{took}."
    )


def broker_shape(cluster: object) -> str:
    return f" ({'three-node cluster' if cluster else 'one broker'})"


def table(head: str | Sequence[str], rows: Iterable[Sequence[object]] = ()) -> list[str]:
    """A markdown table's lines: the head (its names, or one string "a | b"), its rule, a line per
    row (cells as given, str()'d)."""
    if isinstance(head, str):
        head = head.split(" | ")
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows),
    ]


Column = tuple[str, Callable[[Any], object]]


def columns_table(columns: Sequence[Column], items: Iterable[Any]) -> str:
    """A markdown table (joined lines) from column specs: each column's name beside what fills its
    cell from an item, so a table is said once, as data, and its head cannot drift from its cells."""
    return "\n".join(table([name for name, _ in columns], ([fill(i) for _, fill in columns] for i in items)))


def figure(path: str, spec: str = ".1f", unit: str = "") -> Callable[[Any], str]:
    """A column's filler: the figure at the dotted `path` of an item (e.g. "wait_ms.p95"), as `cell`
    renders it; "-" when any step along the path is None."""

    def fill(item: Any) -> str:
        for name in path.split("."):
            item = None if item is None else getattr(item, name)
        return cell(item, spec, unit)

    return fill


def outcomes(by_status: Mapping[str, int]) -> str:
    """A count per status, "OK 3, EXPIRED 1"; "-" for none."""
    return ", ".join(f"{k} {v}" for k, v in by_status.items()) or "-"


TARGET_HEAD = ("target", "measured", "threshold", "verdict")
PASS, MISS, NA = "PASS", "MISS", "n/a"


def verdict(ok: bool | None) -> str:
    """A target's verdict cell: PASS, MISS, or n/a when there was nothing to judge (None)."""
    return NA if ok is None else PASS if ok else MISS


def publish(
    out: Path,
    name: str,
    document: Mapping[str, Any],
    markdown: str,
    *,
    indent: int | None = None,
    default: Callable[[Any], Any] | None = None,
    json_end: str = "",
) -> None:
    """Write `<out>/<name>.json` and `<out>/<name>.md`, print the markdown and where it went."""
    directory = results_dir(out)
    text = json.dumps(document, indent=indent, default=default) + json_end
    (directory / f"{name}.json").write_text(text, encoding="utf-8")
    (directory / f"{name}.md").write_text(markdown, encoding="utf-8")
    print()
    print(markdown)
    seconds = document.get("seconds")
    took = f" ({seconds:.0f} s in all)" if isinstance(seconds, int | float) else ""
    print(f"wrote {directory / (name + '.json')} and {directory / (name + '.md')}{took}", flush=True)


def cell(value: float | None, spec: str = ".1f", unit: str = "") -> str:
    """A table cell of a figure: `value` formatted by `spec`, with `unit`; "-" when there is none."""
    return "-" if value is None else format(value, spec) + unit


def run_record(kind: str, seconds: float) -> dict[str, Any]:
    """What every bench's JSON opens with: the command as typed, the machine, the run's seconds."""
    return {"command": command_line(kind), "machine": machine(), "seconds": seconds}
