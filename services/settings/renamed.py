"""Variables of the previous release, still read for one release under their new names.

A settings class that renamed variables derives from `RenamingSettings` and lists them in
`RENAMED` (old name → new name). An old name is read only where its new name is not set: when
both are set the new one wins. `renamed_warnings` says, once per old name set, which name to use
instead (and that the new one won, when both are set and differ); it never quotes a value, since a
value may be a key or a password.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import ClassVar

from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource

log = logging.getLogger("inferq.settings")


class RenamedEnvSource(EnvSettingsSource):
    """The environment's old names, presented under their new names (the first old name set wins)."""

    def __init__(self, settings_cls: type[BaseSettings], renamed: Mapping[str, str]) -> None:
        self._renamed = dict(renamed)  # before super().__init__, which loads the variables
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        present = super()._load_env_vars()
        fold = (lambda name: name) if self.case_sensitive else str.lower
        found: dict[str, str | None] = {}
        for old, new in self._renamed.items():
            if fold(old) in present:
                found.setdefault(fold(new), present[fold(old)])
        return found


class RenamingSettings(BaseSettings):
    """Settings that still read the names of `RENAMED`, below the environment's current names."""

    RENAMED: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Earlier sources win: a current name beats an old one.
        old_names = RenamedEnvSource(settings_cls, cls.RENAMED)
        return init_settings, env_settings, old_names, dotenv_settings, file_secret_settings


def renamed_of(models: Iterable[type[BaseSettings]]) -> dict[str, str]:
    """Old name → new name of every model in `models` that renamed variables."""
    renamed: dict[str, str] = {}
    for model in models:
        if issubclass(model, RenamingSettings):
            renamed.update(model.RENAMED)
    return renamed


def renamed_warnings(renamed: Mapping[str, str], environ: Mapping[str, str]) -> list[str]:
    """One line per old name set in `environ`, naming the new one; never a value."""
    lines = []
    for old, new in renamed.items():
        if old not in environ:
            continue
        line = f"{old} is deprecated (read for this release only): set {new} instead"
        if new in environ and environ[new] != environ[old]:
            line += f"; {new} is set too, to another value, and is the one used"
        lines.append(line)
    return lines


def log_renamed(models: Iterable[type[BaseSettings]], environ: Mapping[str, str]) -> None:
    """Log `renamed_warnings` of `models` at start-up, one warning per old name set."""
    for line in renamed_warnings(renamed_of(models), environ):
        log.warning("%s", line)
