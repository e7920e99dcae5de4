"""The tenants in force for one service process, reloaded without a restart.

`TenantRegistry` loads the tenants file at start (a bad file stops the service: `TenantsFileError`
names the lines) and then re-reads it every `reload_interval_s` and on SIGHUP. A file whose bytes
changed is parsed again; a valid one replaces the directory at once (a new key works from then on,
a removed key or tenant gets 401), an invalid or unreadable one is logged as an error and the
previous tenants stay in force. So does a valid file that would remove every tenant in force, or
more than `max_removed_share` of them (`removal_refusal`): that is what a copy caught mid-write
looks like (an empty file is valid TOML with no tenants), and it would revoke every key at once.
A valid file that drops every ``[service] record_keys`` the file in force had is kept out too
(ingest could sign no record and the dispatcher would refuse every one it wrote). A service that
writes request records (ingest, the dispatcher's retries) is `loaded` with `signs_records`: a
tenants file without ``[service] record_keys`` stops it at start (`TenantsFileError`).
The first load is not a reload: a file with no tenants at start is served as it is (every key 401),
with a warning. Open mode (no file) is decided at start and never entered later: a deleted file
keeps the last tenants.

Listeners (`on_change`) run on the event loop after each swap: ingest re-sizes its rate buckets.
The SIGHUP handler only wakes the watcher (it runs on the loop, via `add_signal_handler`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import SecretStr

from inferq.messaging.topics import TopicNames
from inferq.supervised import SupervisedTask
from inferq.tenancy.auth import ANONYMOUS, Principal, authenticate
from inferq.tenancy.errors import NO_SERVICE_KEY, FileProblem, TenantsFileError
from inferq.tenancy.loading import decode_tenants, read_tenants_file
from inferq.tenancy.model import OPEN_TENANT, Tenant, TenantDirectory
from inferq.tenancy.settings import DEFAULT_MAX_REMOVED_SHARE, TenancySettings

# What `signal.getsignal` returns and `signal.signal` takes.
SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

log = logging.getLogger("inferq.tenancy")

_STOP_WAIT_S = 1.0
# The label of a result whose tenant the file does not list (removed, or written straight to Kafka).
OTHER_LABEL = "other"


class TenantRegistry:
    """The current `TenantDirectory` of the file at `path` (None: open mode).

    `load()` must succeed once before the service serves; `start()`/`stop()` run the watcher
    (idempotent). `reload()` re-reads the file now; it returns whether the tenants changed.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        topics: TopicNames | None = None,
        reload_interval_s: float = 2.0,
        max_removed_share: float = DEFAULT_MAX_REMOVED_SHARE,
    ) -> None:
        if reload_interval_s <= 0:
            raise ValueError(f"reload_interval_s must be > 0, got {reload_interval_s}")
        if not 0 <= max_removed_share <= 1:
            raise ValueError(f"max_removed_share must be within 0..1, got {max_removed_share}")
        self._max_removed_share = max_removed_share
        self._path = path
        self._topics = topics
        self._interval_s = reload_interval_s
        self._directory: TenantDirectory | None = None
        self._fingerprint: bytes | None = None
        self._listeners: list[Callable[[TenantDirectory], None]] = []
        self._wake: asyncio.Event | None = None
        self._task = SupervisedTask(
            "tenants-reload",
            ended="tenants watcher stopped: the file is no longer reloaded",
            stop_timeout_s=_STOP_WAIT_S,
            log=log,
        )
        self._sighup_loop: asyncio.AbstractEventLoop | None = None
        self._sighup_before: SignalHandler = signal.SIG_DFL
        self.reloads = 0
        self.failed_reloads = 0
        # Valid files kept out because they removed too many tenants (`removal_refusal`).
        self.refused_reloads = 0

    @classmethod
    def loaded(
        cls, settings: TenancySettings, topics: TopicNames, *, signs_records: bool = False
    ) -> TenantRegistry:
        """The registry of ``INFERQ_TENANTS_*``, its file read (`TenantsFileError` when unusable,
        or, with `signs_records`, when it has no ``[service] record_keys`` to sign with)."""
        registry = cls(
            settings.file,
            topics=topics,
            reload_interval_s=settings.reload_interval_s,
            max_removed_share=settings.max_removed_share,
        )
        directory = registry.load()
        if signs_records and directory is not None and not directory.service_record_keys:
            raise TenantsFileError(settings.file or "", [FileProblem(NO_SERVICE_KEY)])
        return registry

    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def open_mode(self) -> bool:
        return self._path is None

    @property
    def directory(self) -> TenantDirectory | None:
        """The tenants in force; None in open mode."""
        return self._directory

    def load(self) -> TenantDirectory | None:
        """Read the file for the first time; `TenantsFileError` when it cannot be used."""
        if self._path is None:
            log.warning(
                "OPEN MODE: no tenants file (INFERQ_TENANTS_FILE); every caller is tenant %r with the "
                "global rules, no key asked; loopback addresses only",
                OPEN_TENANT.name,
            )
            return None
        data = read_tenants_file(self._path)
        directory = decode_tenants(data, self._path, topics=self._topics)
        self._swap(directory, hashlib.sha256(data).digest())
        log.info("tenants loaded from %s: %s", self._path, _names(directory))
        if not len(directory):
            log.warning("the tenants file lists no tenant: every request is refused (401) until it does")
        return directory

    def on_change(self, listener: Callable[[TenantDirectory], None]) -> None:
        """Call `listener` with every new directory (and now, with the current one)."""
        self._listeners.append(listener)
        if self._directory is not None:
            listener(self._directory)

    def authenticate(self, authorization: Sequence[str]) -> Principal:
        """The caller of a request with these Authorization values; `AuthenticationError` (401)."""
        if self.open_mode:
            return ANONYMOUS
        return authenticate(self._directory, authorization)

    def service_record_keys(self) -> tuple[SecretStr, ...]:
        """The keys inferq's own writers sign request records with (the first current); none in
        open mode (`inferq.messaging.record_signing`)."""
        return () if self._directory is None else self._directory.service_record_keys

    def weights(self) -> Mapping[str, float] | None:
        """Each tenant's weight; None in open mode (no per-tenant shares)."""
        return None if self._directory is None else self._directory.weights

    def tenant(self, name: str) -> Tenant | None:
        """The tenant the file in force lists as `name`; None when it lists none or in open mode."""
        return None if self._directory is None else self._directory.get(name)

    def label(self, tenant: str) -> str:
        """The metrics label of `tenant`: its name when the file lists it, ``default`` in open mode,
        else ``other`` (the label set stays bounded by the file)."""
        if self._directory is None:
            return OPEN_TENANT.name
        return tenant if self.tenant(tenant) is not None else OTHER_LABEL

    def request_reload(self) -> None:
        """Reload at the watcher's next turn, changed or not (the SIGHUP handler)."""
        if self._wake is not None:
            self._wake.set()

    async def reload(self, *, force: bool = False) -> bool:
        """Re-read the file; True when a new directory is in force. An invalid or unreadable file, or
        one removing too many tenants, is logged (once per content) and the previous tenants stay."""
        path = self._path
        if path is None:
            return False
        try:
            data = await asyncio.to_thread(read_tenants_file, path)
        except TenantsFileError as exc:
            if self._fingerprint != b"unreadable":
                self._fingerprint = b"unreadable"
                self.failed_reloads += 1
                # The reason is the whole story; a traceback per failed read is noise.
                log.error("tenants file unreadable, keeping the previous tenants: %s", exc)  # noqa: TRY400
            return False
        fingerprint = hashlib.sha256(data).digest()
        if fingerprint == self._fingerprint and not force:
            return False
        try:
            directory = decode_tenants(data, path, topics=self._topics)
        except TenantsFileError as exc:
            self._fingerprint = fingerprint
            self.failed_reloads += 1
            log.error("tenants file invalid, keeping the previous tenants:\n%s", exc)  # noqa: TRY400
            return False
        refusal = removal_refusal(self._directory, directory, self._max_removed_share)
        if refusal is None and self.service_record_keys() and not directory.service_record_keys:
            refusal = "it has no [service] record_keys (the file in force has)"
        if refusal is not None:
            self._fingerprint = fingerprint
            self.refused_reloads += 1
            log.error(
                "tenants file refused, keeping the previous tenants: %s; if that is meant, remove "
                "tenants in steps, raise INFERQ_TENANTS_MAX_REMOVED_SHARE or restart the service "
                "(replace the file atomically: docs/tenants.md)",
                refusal,
            )
            return False
        self._swap(directory, fingerprint)
        self.reloads += 1
        log.info("tenants reloaded from %s: %s", path, _names(directory))
        return True

    async def start(self, *, sighup: bool = False) -> None:
        """Watch the file (nothing to watch in open mode); with `sighup`, SIGHUP reloads at once."""
        if self._task.started or self._path is None:
            return
        self._wake = asyncio.Event()
        if sighup:
            loop = asyncio.get_running_loop()
            self._sighup_before = signal.getsignal(signal.SIGHUP)
            loop.add_signal_handler(signal.SIGHUP, self.request_reload)
            self._sighup_loop = loop
        self._task.start(self._watch(self._wake))

    async def stop(self) -> None:
        if self._sighup_loop is not None:
            self._sighup_loop.remove_signal_handler(signal.SIGHUP)
            self._sighup_loop = None
            # remove_signal_handler leaves SIG_DFL; put back what the process had (SIG_IGN under nohup).
            signal.signal(signal.SIGHUP, self._sighup_before)
        await self._task.stop()

    async def _watch(self, wake: asyncio.Event) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self._interval_s)
            forced = wake.is_set()
            wake.clear()
            if forced:
                log.info("SIGHUP: reloading the tenants file")
            await self.reload(force=forced)

    def _swap(self, directory: TenantDirectory, fingerprint: bytes) -> None:
        self._directory = directory
        self._fingerprint = fingerprint
        for listener in self._listeners:
            listener(directory)


def removal_refusal(
    before: TenantDirectory | None, after: TenantDirectory, max_removed_share: float
) -> str | None:
    """Why `after` may not replace `before` (counts only, no names or keys), or None when it may: it
    removes every tenant of `before`, or more than `max_removed_share` of them. Added tenants do not
    offset removed ones (a renamed tenant is one removed); an empty `before` allows anything."""
    if not before:
        return None
    removed = sum(1 for name in before.tenants if name not in after.tenants)
    if removed == len(before):
        return f"it removes every tenant in force ({removed} of {removed}; {len(after)} in the file)"
    if removed > max_removed_share * len(before):
        return (
            f"it removes {removed} of the {len(before)} tenants in force ({removed / len(before):.0%}), "
            f"more than the {max_removed_share:.0%} allowed"
        )
    return None


def _names(directory: TenantDirectory) -> str:
    return f"{len(directory)} tenants ({', '.join(sorted(directory.tenants)) or 'none'})"
