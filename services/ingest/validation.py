"""The ingest API's request body, validated field by field so every refusal names the field."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from services.messaging.tiers import Tier

Role = Literal["system", "user", "assistant", "tool", "developer"]
_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Role
    content: str = Field(max_length=512_000)


class SubmitRequest(BaseModel):
    """``POST /v1/requests`` body. `deadline_ms` is relative (ms from now); `expire_at_ms` absolute."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field(min_length=1, max_length=64)
    messages: list[Message] = Field(min_length=1, max_length=256)
    model: str | None = Field(default=None, min_length=1, max_length=128)
    tenant: str = Field(default="default", min_length=1, max_length=64)
    session_id: str | None = Field(default=None, min_length=1, max_length=128)
    deadline_ms: int | None = Field(default=None, gt=0, le=7 * 24 * 3_600_000)
    expire_at_ms: int | None = Field(default=None, gt=0)
    priority: Tier | None = None
    request_id: str | None = None
    estimated_tokens: int | None = Field(default=None, ge=0)
    reply_to: str | None = Field(default=None, min_length=1, max_length=249)
    params: dict[str, str | int | float | bool] | None = None

    @field_validator("request_id")
    @classmethod
    def _request_id_shape(cls, value: str | None) -> str | None:
        if value is not None and not _ID.match(value):
            raise ValueError("must be 1-128 characters of letters, digits, '.', '_', ':' or '-'")
        return value


def describe(exc: ValidationError) -> list[dict[str, str]]:
    """One entry per problem: the dotted field path and what is wrong with it."""
    problems = []
    for err in exc.errors(include_url=False, include_input=False):
        field = ".".join(str(p) for p in err["loc"]) or "body"
        problems.append({"field": field, "problem": err["msg"]})
    return problems
