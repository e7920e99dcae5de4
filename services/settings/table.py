"""Every variable a settings model reads, as rows taken from the model itself.

A row's description is the field's (``Field(description=...)`` or the docstring under the field,
``use_attribute_docstrings``), its default the field's, its name the variable pydantic-settings
reads: the alias when there is one, else the model's ``env_prefix`` and the field's name. A field
whose type is itself a settings class (``kafka``, ``tenants``, ``redis``...) reads its own
variables: its rows are its fields'. Rendered here as ``--help`` text, ``inferq config show``
lines and the Markdown of docs/configuration.md.
"""

from __future__ import annotations

import enum
import json
import re
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import AliasChoices, BaseModel, SecretStr, TypeAdapter
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from inferq.redaction import masked

_QUALIFIED = re.compile(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)")


@dataclass(frozen=True, slots=True)
class Setting:
    """One variable: where it lands in its model (`path`) and what a reader needs to set it."""

    name: str
    path: tuple[str, ...]
    type: str
    default: str
    description: str
    secret: bool
    # Other names read for the same value (e.g. KAFKA_BOOTSTRAP_SERVERS); deprecated ones aside.
    also: tuple[str, ...] = ()


def settings_of(model: type[BaseSettings], path: tuple[str, ...] = ()) -> Iterator[Setting]:
    """The rows of `model`, nested settings classes included, in the order of its fields."""
    prefix = str(model.model_config.get("env_prefix", ""))
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseSettings):
            yield from settings_of(annotation, (*path, name))
            continue
        names = _env_names(prefix, name, field)
        yield Setting(
            name=names[0],
            path=(*path, name),
            type=type_name(annotation),
            default=_shown_default(field),
            description=" ".join((field.description or "").split()),
            secret=_is_secret(annotation),
            also=tuple(names[1:]),
        )


def _env_names(prefix: str, name: str, field: FieldInfo) -> list[str]:
    alias = field.validation_alias
    if isinstance(alias, str):
        return [alias.upper()]
    if isinstance(alias, AliasChoices):
        # The variables (upper case by convention); a lower-case choice is the field's own name.
        names = [c for c in alias.choices if isinstance(c, str) and c.isupper()]
        if names:
            return names
    return [f"{prefix}{name}".upper()]


def type_name(annotation: Any) -> str:
    """A reader's name of a field's type: ``int``, ``float | None``, ``one of local, redis``."""
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(str(choice) for choice in get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(str(member.value) for member in annotation)
    if isinstance(annotation, type) and not get_args(annotation):
        return annotation.__name__
    text = _QUALIFIED.sub(r"\1", str(annotation)).replace("NoneType", "None")
    text = text.replace("Annotated[Path, PathType(path_type='file')]", "FilePath")
    return re.sub(r"^Optional\[(.*)\]$", r"\1 | None", text)


def _is_secret(annotation: Any) -> bool:
    return annotation is SecretStr or SecretStr in get_args(annotation)


def _shown_default(field: FieldInfo) -> str:
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("shown_default"), str):
        return str(extra["shown_default"])
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    annotation: Any = field.annotation
    return shown(TypeAdapter(annotation).dump_python(value, mode="json"))


def shown(value: Any) -> str:
    """A JSON-like value as a variable would hold it: strings bare, None as "unset", else JSON."""
    if value is None:
        return "unset"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def settings_in(models: Iterable[type[BaseSettings]]) -> list[Setting]:
    """The rows of `models`, each variable once (a block several models nest is read once)."""
    seen: dict[str, Setting] = {}
    for model in models:
        for setting in settings_of(model):
            seen.setdefault(setting.name, setting)
    return list(seen.values())


def effective(instance: BaseModel, settings: Iterable[Setting]) -> Iterator[tuple[Setting, str]]:
    """Each setting's value in `instance`, with secrets masked (never a secret's text)."""
    dumped = instance.model_dump(mode="json")  # SecretStr dumps as '**********'
    for setting in settings:
        value: Any = dumped
        for part in setting.path:
            value = value[part]
        yield setting, shown(masked(value))


def help_text(settings: Iterable[Setting], *, width: int = 100) -> str:
    """The settings as an argparse epilog: the variable and its default, its description beneath."""
    lines = ["settings (environment variables; `inferq config show` prints the values in effect):"]
    for setting in settings:
        lines.append(f"  {setting.name}  (default: {setting.default})")
        wrapped = textwrap.wrap(setting.description, width=width - 6) or [""]
        lines.extend(f"      {line}" for line in wrapped)
    return "\n".join(lines)
