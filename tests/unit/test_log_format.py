"""INFERQ_LOG_FORMAT=json: one JSON object per line, whatever a message holds; text stays the default."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from inferq.log_format import JsonLines, formatter


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.getLogger("inferq.test").makeRecord(
        "inferq.test", logging.WARNING, __file__, 1, message, (), None, extra=extra
    )
    return record


def test_a_json_line_has_the_fields_and_stays_one_line() -> None:
    line = JsonLines().format(_record('first\nsecond "quoted"', request_id="r-1", partition=3))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "inferq.test"
    assert entry["message"] == 'first\nsecond "quoted"'
    assert entry["request_id"] == "r-1"
    assert entry["partition"] == 3
    assert entry["ts"].endswith("+00:00")


def test_an_exception_is_one_field_of_the_same_line() -> None:
    try:
        raise RuntimeError("broken\nacross lines")
    except RuntimeError:
        record = logging.getLogger("x").makeRecord(
            "x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    line = JsonLines().format(record)
    assert "\n" not in line
    assert "RuntimeError: broken" in json.loads(line)["exception"]


def test_an_unknown_format_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="text, json"):
        formatter("yaml")


@pytest.mark.parametrize("log_format", ["json", "JSON"])
def test_a_service_logs_only_json_lines_uvicorn_included(log_format: str) -> None:
    """The services' logging and uvicorn's own lines (here, a port already taken) in one format."""
    script = (
        "import logging, socket\n"
        "from inferq.serving import configure_logging, run_asgi\n"
        "configure_logging()\n"
        "logging.getLogger('inferq.probe').info('starting')\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "async def app(scope, receive, send): pass\n"
        "raise SystemExit(run_asgi(app, '127.0.0.1', s.getsockname()[1]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={"INFERQ_LOG_FORMAT": log_format, "PATH": "/usr/bin:/bin"},
        check=False,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]
    assert {"logger": "inferq.probe", "message": "starting"}.items() <= entries[0].items()
    assert any(e["logger"].startswith("uvicorn") for e in entries), done.stderr


def test_an_unknown_format_ends_the_service_with_a_message() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from inferq.serving import configure_logging; configure_logging()"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"INFERQ_LOG_FORMAT": "xml", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "inferq: INFERQ_LOG_FORMAT must be one of text, json, not 'xml'"
