"""docs/configuration.md is what the settings models give (`make config-docs` rewrites it)."""

from __future__ import annotations

from pathlib import Path

from inferq.config.table import markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_configuration_doc_is_the_one_the_models_generate() -> None:
    assert DOC.read_text(encoding="utf-8") == markdown(), (
        "docs/configuration.md is stale: run `make config-docs` (inferq config docs > docs/configuration.md)"
    )
