"""The tenants file (TOML) → a `TenantDirectory`, or a `TenantsFileError` naming every problem's line.

The format is documented field by field in ``infra/tenants.example.toml``: one ``[[tenants]]`` table
per tenant with ``[tenants.entitlements]`` (and ``[tenants.entitlements.params]``) under it. Every
key is checked: an unknown key is an error, not ignored, so a typo never silently grants or denies.

Where a problem is: tomllib reports a syntax error's line and column; a semantic problem (weight 0,
a duplicate name, a malformed hash) is reported at the line of the field when it can be found in
the entry's lines, else at its ``[[tenants]]`` header, and names the entry (``[[tenants]] #2
'acme'``). Messages never quote a key hash or a key.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from inferq.messaging import limits
from inferq.messaging.param_rules import passthrough_name_ok
from inferq.messaging.reply_topics import MAX_TOPIC_CHARS, is_allowed_reply_topic
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicNames
from inferq.tenancy.errors import FileProblem, TenantsFileError
from inferq.tenancy.held import MAX_HELD, HeldLimits
from inferq.tenancy.keys import KEY_PREFIX, digest_of_hash, is_key_hash
from inferq.tenancy.model import (
    ANY,
    DEFAULT_PARAMS,
    DEFAULT_ROLES,
    MAX_KEYS_PER_TENANT,
    MAX_SECRETS,
    MAX_WEIGHT,
    NUMERIC_PARAM_BOUNDS,
    ROLES,
    WHOLE_PARAMS,
    Entitlements,
    NameSet,
    Tenant,
    TenantDirectory,
)
from inferq.tenancy.secret_forms import record_key_problem, webhook_secret_problem

# A tenants file is a few KB; a bound keeps a mistaken path (a log file) from being read whole.
MAX_FILE_BYTES = 1_048_576
MAX_LIST_ITEMS = 1_000
MAX_RATE = 10_000_000
MAX_CONCURRENCY = 100_000
_TOP_LEVEL = frozenset({"tenants", "limits", "service"})
_SERVICE_FIELDS = frozenset({"record_keys"})
_TENANT_FIELDS = frozenset(
    {
        "name",
        "keys",
        "weight",
        "max_concurrency",
        "requests_per_minute",
        "burst",
        "entitlements",
        "webhook_secret",
        "record_keys",
        "limits",
    }
)
_ENTITLEMENT_FIELDS = frozenset(
    {
        "max_tier",
        "scenarios",
        "models",
        "params",
        "roles",
        "max_estimated_tokens",
        "max_deadline_ms",
        "reply_topics",
        "callback_hosts",
    }
)
_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)$")
_HEADER = re.compile(r"\s*\[\[\s*tenants\s*\]\]\s*(#.*)?")
_HOST = re.compile(
    r"(?=.{1,253}(:|$))[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*(:[0-9]{1,5})?"
)


def load_tenants(path: Path, *, topics: TopicNames | None = None) -> TenantDirectory:
    """Read and check the tenants file at `path`. With `topics`, every listed reply topic must also
    pass the global reply-topic rule of that pipeline. Raises `TenantsFileError`."""
    return decode_tenants(read_tenants_file(path), path, topics=topics)


def read_tenants_file(path: Path) -> bytes:
    """The file's bytes (at most `MAX_FILE_BYTES` + 1); `TenantsFileError` when it cannot be read."""
    try:
        with path.open("rb") as file:
            return file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise TenantsFileError(path, [FileProblem(f"cannot read the tenants file: {exc.strerror}")]) from exc


def decode_tenants(data: bytes, path: Path, *, topics: TopicNames | None = None) -> TenantDirectory:
    """`parse_tenants` of a file's bytes: bounded in size, UTF-8."""
    if len(data) > MAX_FILE_BYTES:
        raise TenantsFileError(path, [FileProblem(f"larger than {MAX_FILE_BYTES} bytes: not a tenants file")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TenantsFileError(path, [FileProblem("not UTF-8 text", line=line)]) from exc
    return parse_tenants(text, path, topics=topics)


def parse_tenants(
    text: str, path: Path | str = "<tenants>", *, topics: TopicNames | None = None
) -> TenantDirectory:
    """The directory `text` describes; `TenantsFileError` listing every problem with its line."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TenantsFileError(path, [_syntax_problem(str(exc))]) from exc
    lines = _Lines(text)
    problems: list[FileProblem] = [
        FileProblem(
            f"unknown key {key!r} (the file holds [[tenants]] tables, [limits] and [service])",
            line=lines.top_level(key),
        )
        for key in document
        if key not in _TOP_LEVEL
    ]
    file_wide = _FileWideCheck(document, lines)
    problems += file_wide.problems
    entries = document.get("tenants", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        problems.append(FileProblem("'tenants' must be [[tenants]] tables", line=lines.top_level("tenants")))
        raise TenantsFileError(path, problems)
    lines.expect_entries(len(entries))
    tenants: list[Tenant] = []
    names: dict[str, int] = {}
    digests: dict[bytes, int] = {}
    for index, entry in enumerate(entries):
        checked = _EntryCheck(index, entry, lines, topics, file_wide.limits)
        tenant = checked.tenant()
        problems += checked.problems
        if tenant is None:
            continue
        if tenant.name in names:
            problems.append(
                checked.problem("name", f"duplicate name: entry #{names[tenant.name] + 1} has it too")
            )
            continue
        shared = [digests[d] for d in tenant.key_digests if d in digests]
        if shared:
            problems.append(
                checked.problem("keys", f"a key hash of entry #{shared[0] + 1} is listed here too")
            )
            continue
        names[tenant.name] = index
        digests.update(dict.fromkeys(tenant.key_digests, index))
        tenants.append(tenant)
    if problems:
        raise TenantsFileError(path, problems)
    return TenantDirectory(
        tenants, service_record_keys=file_wide.record_keys, default_limits=file_wide.limits
    )


def _syntax_problem(message: str) -> FileProblem:
    match = _TOML_POSITION.search(message)
    if match is None:
        return FileProblem(f"TOML syntax: {message}")
    return FileProblem(
        f"TOML syntax: {message[: match.start()].strip()}", line=int(match[1]), column=int(match[2])
    )


class _Lines:
    """Where entries and their fields are in the text: the n-th ``[[tenants]]`` header is entry n's.

    A file that spells its tenants another way (an inline array) has no headers to count; its
    problems then name the entry without a line.
    """

    def __init__(self, text: str) -> None:
        self._lines = text.splitlines()
        self._headers = [i + 1 for i, line in enumerate(self._lines) if _HEADER.fullmatch(line)]

    def expect_entries(self, count: int) -> None:
        if len(self._headers) != count:
            self._headers = []

    def entry(self, index: int) -> int | None:
        return self._headers[index] if index < len(self._headers) else None

    def field(self, index: int, name: str) -> int | None:
        """The line of `name` within entry `index` (its first assignment there), else the entry's."""
        start = self.entry(index)
        if start is None:
            return None
        end = self._headers[index + 1] - 1 if index + 1 < len(self._headers) else len(self._lines)
        assignment = re.compile(rf'\s*(?:[A-Za-z0-9_."-]+\.)?"?{re.escape(name)}"?\s*=')
        for number in range(start, end + 1):
            if assignment.match(self._lines[number - 1]):
                return number
        return start

    def top_level(self, key: str) -> int | None:
        assignment = re.compile(rf'\s*"?{re.escape(key)}"?\s*=|\s*\[+\s*{re.escape(key)}\b')
        for number, line in enumerate(self._lines, start=1):
            if assignment.match(line):
                return number
        return None


def _limits_problems(value: Any, base: HeldLimits, where: str) -> tuple[HeldLimits, list[str]]:
    """`base` with the counts of a ``limits`` table over it, and what is wrong (``field: problem``)."""
    if value is None:
        return base, []
    if not isinstance(value, dict):
        return base, [f"{where}: must be a table"]
    known = HeldLimits.names()
    problems = [
        f"{where}.{key}: unknown field (known: {', '.join(known)})" for key in sorted(set(value) - set(known))
    ]
    counts = {name: getattr(base, name) for name in known}
    for name in known:
        if name not in value:
            continue
        count = value[name]
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_HELD:
            problems.append(f"{where}.{name}: must be an integer within 1..{MAX_HELD}")
        else:
            counts[name] = count
    return HeldLimits(**counts), problems


def _secrets_problems(
    value: Any, where: str, problem_of: Callable[[object], str | None], *, one_allowed: bool
) -> tuple[tuple[SecretStr, ...], list[str]]:
    """The 1-2 secrets of `value` (a list; a single string too when `one_allowed`), and what is
    wrong. Messages never hold a value: they go to logs."""
    if value is None:
        return (), []
    items = [value] if one_allowed and isinstance(value, str) else value
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_SECRETS:
        return (), [f"{where}: must be a list of 1 to {MAX_SECRETS} (current, previous)"]
    problems = []
    for position, item in enumerate(items):
        problem = problem_of(item)
        if problem is not None:
            problems.append(f"{where}" + (f"[{position}]" if len(items) > 1 else "") + f": {problem}")
    if len(set(items)) < len(items) and not problems:
        problems.append(f"{where}: the same secret is listed twice")
    return (tuple(SecretStr(i) for i in items) if not problems else ()), problems


class _FileWideCheck:
    """The top-level ``[limits]`` (every tenant's default limits) and ``[service]`` tables."""

    def __init__(self, document: Mapping[str, Any], lines: _Lines) -> None:
        self.problems: list[FileProblem] = []
        self.limits, limit_problems = _limits_problems(document.get("limits"), HeldLimits(), "limits")
        self.record_keys: tuple[SecretStr, ...] = ()
        service = document.get("service")
        service_problems: list[str] = []
        if service is not None and not isinstance(service, dict):
            service_problems.append("service: must be a table ([service])")
        elif service is not None:
            service_problems += [
                f"service.{key}: unknown field (known: record_keys)"
                for key in sorted(set(service) - _SERVICE_FIELDS)
            ]
            self.record_keys, found = _secrets_problems(
                service.get("record_keys"), "service.record_keys", record_key_problem, one_allowed=False
            )
            service_problems += found
        for problem in limit_problems + service_problems:
            key = problem.split(":")[0].split(".")[-1].split("[")[0]
            self.problems.append(FileProblem(problem, line=lines.top_level(key)))


class _EntryCheck:
    """Checks one ``[[tenants]]`` table, collecting problems; `tenant()` is None when there are any."""

    def __init__(
        self,
        index: int,
        entry: dict[str, Any],
        lines: _Lines,
        topics: TopicNames | None,
        default_limits: HeldLimits,
    ) -> None:
        self.default_limits = default_limits
        self.index = index
        self.entry = entry
        self.lines = lines
        self.topics = topics
        self.problems: list[FileProblem] = []
        name = entry.get("name")
        shown = (
            repr(name) if isinstance(name, str) and limits.ID_PATTERN.fullmatch(name) else "(no valid name)"
        )
        header = lines.entry(index)
        self.label = f"[[tenants]] #{index + 1} {shown}" + (f" (line {header})" if header else "")

    def problem(self, field: str, problem: str) -> FileProblem:
        # `entitlements.params.top_p` is found by `top_p`, `keys[1]` by `keys`.
        key = field.split(".")[-1].split("[")[0]
        return FileProblem(f"{field}: {problem}", line=self.lines.field(self.index, key), entry=self.label)

    def fail(self, field: str, problem: str) -> None:
        self.problems.append(self.problem(field, problem))

    def tenant(self) -> Tenant | None:
        entry = self.entry
        for key in sorted(set(entry) - _TENANT_FIELDS):
            self.fail(key, f"unknown field (known: {', '.join(sorted(_TENANT_FIELDS))})")
        name = self._identifier(entry, "name", limits.MAX_TENANT_CHARS, required=True)
        digests = self._keys(entry.get("keys"))
        weight = self._weight(entry.get("weight"))
        max_concurrency = self._count(entry, "max_concurrency", MAX_CONCURRENCY)
        rpm = self._count(entry, "requests_per_minute", MAX_RATE)
        burst = self._count(entry, "burst", MAX_RATE)
        if burst is not None and rpm is None and "requests_per_minute" not in entry:
            self.fail("burst", "needs requests_per_minute")
        entitlements = self._entitlements(entry.get("entitlements"))
        webhook_secrets = self._secrets("webhook_secret", webhook_secret_problem, one_allowed=True)
        record_keys = self._secrets("record_keys", record_key_problem, one_allowed=False)
        held, limit_problems = _limits_problems(entry.get("limits"), self.default_limits, "limits")
        for problem in limit_problems:
            field, _, message = problem.partition(": ")
            self.fail(field, message)
        if self.problems or name is None or digests is None or weight is None or entitlements is None:
            return None
        try:
            return Tenant(
                name=name,
                key_digests=digests,
                weight=weight,
                entitlements=entitlements,
                max_concurrency=max_concurrency,
                requests_per_minute=rpm,
                burst=burst,
                webhook_secrets=webhook_secrets,
                record_keys=record_keys,
                limits=held,
            )
        except ValueError as exc:  # every rule is checked above; this is a backstop
            self.fail("name", str(exc))
            return None

    # --- the tenant's own fields -------------------------------------------------------------------

    def _identifier(
        self, table: Mapping[str, Any], key: str, max_chars: int, *, required: bool
    ) -> str | None:
        value = table.get(key)
        if value is None:
            if required:
                self.fail(key, "is required")
            return None
        if not isinstance(value, str) or len(value) > max_chars or not limits.ID_PATTERN.fullmatch(value):
            self.fail(key, f"must be 1-{max_chars} letters, digits, '.', '_', ':' or '-'")
            return None
        return value

    def _secrets(
        self, key: str, problem_of: Callable[[object], str | None], *, one_allowed: bool
    ) -> tuple[SecretStr, ...]:
        found, problems = _secrets_problems(self.entry.get(key), key, problem_of, one_allowed=one_allowed)
        for problem in problems:
            field, _, message = problem.partition(": ")
            self.fail(field, message)
        return found

    def _keys(self, value: Any) -> tuple[bytes, ...] | None:
        if value is None:
            self.fail("keys", "is required: one or two key hashes (inferq tenants key prints one)")
            return None
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_KEYS_PER_TENANT:
            self.fail("keys", f"must be a list of 1 to {MAX_KEYS_PER_TENANT} key hashes (current, previous)")
            return None
        digests: list[bytes] = []
        for position, item in enumerate(value):
            if isinstance(item, str) and item.startswith(KEY_PREFIX):
                # Said without the value: it is a live key, and this message goes to logs.
                self.fail(
                    f"keys[{position}]",
                    "is a key, not its hash: the file holds only 'sha256:<hex>' (inferq tenants key "
                    "prints both); treat that key as exposed and make a new one",
                )
            elif not isinstance(item, str) or not is_key_hash(item):
                self.fail(f"keys[{position}]", "is not a key hash: 'sha256:' and 64 lowercase hex digits")
            elif digest_of_hash(item) in digests:
                self.fail(f"keys[{position}]", "the same hash is listed twice")
            else:
                digests.append(digest_of_hash(item))
        return tuple(digests) if len(digests) == len(value) else None

    def _weight(self, value: Any) -> float | None:
        if value is None:
            self.fail("weight", "is required: a number > 0 (the tenant's share)")
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail("weight", "must be a number")
            return None
        if not (math.isfinite(value) and 0 < value <= MAX_WEIGHT):
            self.fail("weight", f"must be > 0 and at most {MAX_WEIGHT:g}, got {value!r}")
            return None
        return float(value)

    def _count(
        self, table: Mapping[str, Any], key: str, maximum: int, *, minimum: int = 1, where: str = ""
    ) -> int | None:
        value = table.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where + key, "must be an integer")
            return None
        if not minimum <= value <= maximum:
            self.fail(where + key, f"must be within {minimum}..{maximum}, got {value}")
            return None
        return value

    # --- entitlements ------------------------------------------------------------------------------

    def _entitlements(self, value: Any) -> Entitlements | None:
        if value is None:
            self.fail(
                "entitlements", "is required: a [tenants.entitlements] table with max_tier and scenarios"
            )
            return None
        if not isinstance(value, dict):
            self.fail("entitlements", "must be a table ([tenants.entitlements])")
            return None
        before = len(self.problems)
        for key in sorted(set(value) - _ENTITLEMENT_FIELDS):
            self.fail(
                f"entitlements.{key}", f"unknown field (known: {', '.join(sorted(_ENTITLEMENT_FIELDS))})"
            )
        max_tier = self._tier(value.get("max_tier"))
        scenarios = self._names(
            value, "scenarios", self._is_identifier(limits.MAX_SCENARIO_CHARS), required=True
        )
        models = self._names(value, "models", self._is_identifier(limits.MAX_MODEL_CHARS))
        params = self._params(value.get("params"))
        roles = self._roles(value.get("roles"))
        where = "entitlements."
        max_tokens = self._count(
            value, "max_estimated_tokens", limits.MAX_ESTIMATED_TOKENS, minimum=0, where=where
        )
        max_deadline = self._count(value, "max_deadline_ms", limits.MAX_DEADLINE_MS, where=where)
        reply_topics = self._names(value, "reply_topics", self._is_reply_topic)
        hosts = self._names(
            value, "callback_hosts", lambda h: _HOST.fullmatch(h) is not None, allow_any=False
        )
        if len(self.problems) > before or max_tier is None or scenarios is None or params is None:
            return None
        return Entitlements(
            max_tier=max_tier,
            scenarios=scenarios,
            models=models or NameSet(),
            params=params,
            roles=roles if roles is not None else DEFAULT_ROLES,
            max_estimated_tokens=max_tokens if max_tokens is not None else limits.MAX_ESTIMATED_TOKENS,
            max_deadline_ms=max_deadline if max_deadline is not None else limits.MAX_DEADLINE_MS,
            reply_topics=reply_topics or NameSet(),
            callback_hosts=hosts or NameSet(),
        )

    def _tier(self, value: Any) -> Tier | None:
        if value is None:
            self.fail("entitlements.max_tier", "is required: HIGH, MEDIUM or LOW")
            return None
        if value not in {t.value for t in Tier}:
            self.fail("entitlements.max_tier", "must be HIGH, MEDIUM or LOW")
            return None
        return Tier(value)

    def _is_identifier(self, max_chars: int) -> Callable[[str], bool]:
        return lambda name: len(name) <= max_chars and limits.ID_PATTERN.fullmatch(name) is not None

    def _is_reply_topic(self, name: str) -> bool:
        if len(name) > MAX_TOPIC_CHARS or not limits.TOPIC_PATTERN.fullmatch(name):
            return False
        return self.topics is None or is_allowed_reply_topic(name, self.topics)

    def _names(
        self,
        table: Mapping[str, Any],
        key: str,
        valid: Callable[[str], bool],
        *,
        required: bool = False,
        allow_any: bool = True,
    ) -> NameSet | None:
        field = f"entitlements.{key}"
        value = table.get(key)
        if value is None:
            if required:
                self.fail(field, 'is required: a list of names, or ["*"] for any')
            return None
        if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS:
            self.fail(field, f"must be a list of at most {MAX_LIST_ITEMS} names")
            return None
        for position, item in enumerate(value):
            if not isinstance(item, str) or not (valid(item) or (allow_any and item == ANY)):
                rule = ' (or "*" for any)' if allow_any else ""
                self.fail(f"{field}[{position}]", f"is not a valid name here{rule}")
                return None
        return NameSet.of(value)

    def _params(self, value: Any) -> dict[str, float | None] | None:
        if value is None:
            return dict.fromkeys(DEFAULT_PARAMS)
        if not isinstance(value, dict):
            self.fail("entitlements.params", "must be a table ([tenants.entitlements.params])")
            return None
        allowed: dict[str, float | None] = dict.fromkeys(DEFAULT_PARAMS)
        ok = True
        for name, setting in value.items():
            field = f"entitlements.params.{name}"
            if name not in limits.ALLOWED_PARAMS and not passthrough_name_ok(name):
                known = ", ".join(sorted(limits.ALLOWED_PARAMS))
                self.fail(
                    field,
                    f"not a parameter any request may set (allowed: {known}; or a pass-through field, "
                    "a name of a-z, 0-9 and '_' that inferq does not reserve)",
                )
                ok = False
            elif isinstance(setting, bool):
                if setting:
                    allowed[name] = None
                else:
                    allowed.pop(name, None)
            elif name not in NUMERIC_PARAM_BOUNDS:
                self.fail(field, "must be true or false")
                ok = False
            elif not isinstance(setting, int | float) or (
                name in WHOLE_PARAMS and not isinstance(setting, int)
            ):
                self.fail(field, f"must be true, false or a cap (an integer for {name})")
                ok = False
            else:
                low = 1 if name in WHOLE_PARAMS else 0
                bound = NUMERIC_PARAM_BOUNDS[name]
                if not (math.isfinite(setting) and low <= setting <= bound):
                    self.fail(field, f"cap must be within {low}..{bound:g}, got {setting!r}")
                    ok = False
                else:
                    allowed[name] = setting
        return allowed if ok else None

    def _roles(self, value: Any) -> frozenset[str] | None:
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(r, str) and r in ROLES for r in value):
            self.fail("entitlements.roles", f"must be a list of {', '.join(sorted(ROLES))}")
            return None
        return frozenset(value)
