"""The one header, table and result writer every bench's markdown and JSON go through."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferq.tools.bench.machine import (
    TARGET_HEAD,
    broker_shape,
    cell,
    columns_table,
    figure,
    header,
    outcomes,
    publish,
    table,
)

MACHINE = {
    "commit": "abc1234",
    "uncommitted_changes_in_services": False,
    "date_utc": "2026-01-02 03:04",
    "cores": 2,
    "python": "3.11.9",
    "kafka": "3.7.0",
    "load_average_1m_5m": [1.5, 0.75],
}
DOCUMENT = {"command": "inferq bench replay --records 10", "machine": MACHINE, "seconds": 12.4}


def test_header_names_the_command_the_machine_the_code_and_the_time() -> None:
    assert header(DOCUMENT) == (
        "`inferq bench replay --records 10` on 2026-01-02 03:04 UTC: 2 cores, Python 3.11.9, "
        "Kafka 3.7.0, load average at the end [1.5, 0.75]; code at commit abc1234; 12 s in all."
    )


def test_header_variants_leave_out_python_and_the_time_and_add_the_brokers_shape() -> None:
    dirty = {**DOCUMENT, "machine": {**MACHINE, "uncommitted_changes_in_services": True}}
    assert header(dirty, python=False, kafka=broker_shape(True), in_all=False) == (
        "`inferq bench replay --records 10` on 2026-01-02 03:04 UTC: 2 cores, Kafka 3.7.0 "
        "(three-node cluster), load average at the end [1.5, 0.75]; code at commit abc1234 with "
        "uncommitted changes in services/."
    )
    assert broker_shape(False) == " (one broker)"


def test_table_renders_head_rule_and_rows() -> None:
    assert table(TARGET_HEAD, [("a", 1, "<= 2", "PASS")]) == [
        "| target | measured | threshold | verdict |",
        "|---|---|---|---|",
        "| a | 1 | <= 2 | PASS |",
    ]
    assert table(("x",)) == ["| x |", "|---|"]
    assert table("a | b / c", [(1, None)]) == ["| a | b / c |", "|---|---|", "| 1 | None |"]


def test_a_cell_is_the_figure_formatted_or_a_dash() -> None:
    assert (cell(1.25), cell(1234.5, ",.0f"), cell(2, ".2f", " ms"), cell(-3, "+.1f")) == (
        "1.2",
        "1,234",
        "2.00 ms",
        "-3.0",
    )
    assert cell(None, ".2f", " ms") == "-"


@pytest.mark.parametrize(("indent", "end"), [(None, ""), (2, "\n")])
def test_publish_writes_the_json_and_the_markdown_and_prints_both_places(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], indent: int | None, end: str
) -> None:
    out = tmp_path / "results"
    publish(out, "replay", DOCUMENT, "# Replay\n", indent=indent, json_end=end)
    written = (out / "replay.json").read_text(encoding="utf-8")
    assert written == json.dumps(DOCUMENT, indent=indent) + end
    assert (out / "replay.md").read_text(encoding="utf-8") == "# Replay\n"
    printed = capsys.readouterr().out
    assert "# Replay" in printed
    assert f"wrote {out / 'replay.json'} and {out / 'replay.md'} (12 s in all)" in printed


def test_a_table_from_column_specs_heads_each_column_and_fills_it_from_every_item() -> None:
    items = [{"OK": 2, "EXPIRED": 1}, {}]
    columns = [("outcomes", outcomes), ("n", len)]
    assert columns_table(columns, items).splitlines() == [
        "| outcomes | n |",
        "|---|---|",
        "| OK 2, EXPIRED 1 | 2 |",
        "| - | 0 |",
    ]


def test_a_figure_column_follows_a_dotted_path_and_is_a_dash_where_it_breaks_off() -> None:
    class Stats:
        p95 = 7.25

    class Row:
        wait_ms: object = Stats()
        none: object = None

    assert figure("wait_ms.p95")(Row()) == "7.2"
    assert figure("wait_ms.p95", ".2f", " ms")(Row()) == "7.25 ms"
    assert figure("none.p95")(Row()) == "-"
