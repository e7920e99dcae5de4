"""How the services' log lines look: text for a terminal (the default), or one JSON object per line
for a log pipeline (``INFERQ_LOG_FORMAT=json``).

A JSON line has ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``, ``message`` and, for
an error with a traceback, ``exception``; a line never spans two, whatever the message holds. The
fields a call passes in ``extra`` (``request_id``, ``tenant``...) are added as they are. What is
logged is the services' own wording, which never holds a prompt, an answer, a key or a password.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# What every LogRecord has; anything else on a record came from a call's `extra`.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonLines(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        return json.dumps(entry, ensure_ascii=False, default=str)


def formatter(log_format: str) -> logging.Formatter:
    """The formatter of `log_format` ("text" or "json"); ValueError naming both otherwise."""
    if log_format == "json":
        return JsonLines()
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"INFERQ_LOG_FORMAT must be one of {', '.join(FORMATS)}, not {log_format!r}")
