"""What the benchmark ran on: recorded with every result, since numbers mean little without it."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

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
