"""How the services' log lines look: text for a terminal (the default), or one JSON object per line
for a log pipeline (``INFERQ_LOG_FORMAT=json``).

A JSON line has ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``, ``message`` and, for
an error with a traceback, ``exception``; a line never spans two, whatever the message holds. The
fields a call passes in ``extra`` (``request_id``, ``tenant``...) are added as they are. What is
logged is the services' own wording, which never holds a prompt, an answer, a key or a password.

Both formats pass each line's message and traceback through `redacted_url` (`RedactedUrls`), so a
URL's password or token never reaches the log, whoever logged it: our code, or a library (redis-py,
the OTLP exporter, urllib3) quoting a URL in its own message.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from inferq.redaction import redacted_url

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
        if record.exc_text:  # already formatted (and redacted: `RedactedUrls`)
            entry["exception"] = record.exc_text
        elif record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        return json.dumps(entry, ensure_ascii=False, default=str)


class RedactedUrls(logging.Formatter):
    """`inner`'s line, from the record's message and traceback with every URL redacted; redacted
    before `inner` formats them, so a JSON line's escaping stays intact."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self._inner = inner

    def format(self, record: logging.LogRecord) -> str:
        shown = logging.makeLogRecord(vars(record))  # a copy: other handlers see the record as it was
        shown.msg, shown.args = redacted_url(record.getMessage()), None
        if record.exc_info or record.exc_text:
            text = record.exc_text or self._inner.formatException(record.exc_info)  # type: ignore[arg-type]
            shown.exc_info, shown.exc_text = None, redacted_url(text)
        return self._inner.format(shown)


def formatter(log_format: str) -> logging.Formatter:
    """The formatter of `log_format` ("text" or "json"), URLs redacted; ValueError naming both
    otherwise."""
    if log_format == "json":
        return RedactedUrls(JsonLines())
    if log_format == "text":
        return RedactedUrls(logging.Formatter(TEXT_FORMAT))
    raise ValueError(f"INFERQ_LOG_FORMAT must be one of {', '.join(FORMATS)}, not {log_format!r}")
