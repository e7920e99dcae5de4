"""Refusals of the OpenAI-compatible endpoint that ingest's own API does not have.

ChatRefusal (an `IngestError`, so `SubmitEndpoint.refused` counts it like the others)
 ├── ChatBodyError       400: the OpenAI body or an inferq header is not acceptable (`param` names it)
 ├── ModelNotFoundError  404: a model this deployment does not serve
 ├── WaitersFullError    503: too many callers are waiting for outcomes (Retry-After)
 └── NotFollowingError   503: the reply topic is not followed yet (Kafka down at start; Retry-After)

Each is answered in OpenAI's error shape by `answers.refusal_error`, like every `IngestError`.
"""

from __future__ import annotations

from collections.abc import Mapping

from inferq.ingest.errors import IngestError


class ChatRefusal(IngestError):
    """A refusal with OpenAI's `param` (the field or header at fault) and `code`."""

    param: str | None = None
    code: str | None = None


class ChatBodyError(ChatRefusal):
    status_code = 400
    reason = "invalid"
    code = "invalid_value"

    def __init__(self, message: str, *, param: str | None, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.param = param
        self.code = code


class ModelNotFoundError(ChatRefusal):
    status_code = 404
    reason = "model_not_found"
    code = "model_not_found"
    param = "model"

    def __init__(self) -> None:
        # Unlike OpenAI, the name is not echoed: a refusal never quotes the client's values.
        super().__init__(
            "The model does not exist or you do not have access to it; GET /v1/models lists them."
        )


class WaitersFullError(ChatRefusal):
    status_code = 503
    reason = "waiters_full"
    code = "waiters_full"
    retriable = True

    def __init__(self) -> None:
        super().__init__("too many callers are waiting for outcomes; retry later")

    def headers(self) -> Mapping[str, str]:
        return {"Retry-After": "1"}


class NotFollowingError(ChatRefusal):
    status_code = 503
    reason = "not_following"
    code = "not_following"
    retriable = True

    def __init__(self) -> None:
        super().__init__("not following the reply topic yet; retry later")

    def headers(self) -> Mapping[str, str]:
        return {"Retry-After": "1"}
