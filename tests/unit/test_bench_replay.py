"""The replay bench's table of every run, the median and the verdict."""

from __future__ import annotations

from inferq.tools.bench.replay import render


def test_render_shows_every_run_the_median_and_the_verdict() -> None:
    document = {
        "command": "inferq bench replay",
        "machine": {
            "date_utc": "d",
            "cores": 2,
            "python": "3.11",
            "kafka": "4.1.1",
            "load_average_1m_5m": [1, 2],
        },
        "seconds": 40.0,
        "records": 200_000,
        "runs": 2,
        "median_records_per_s": 111_110.5,
        "rates_records_per_s": [123_456.0, 98_765.0],
        "target_records_per_s": 100_000.0,
        "verdict": "PASS",
        "log": ["filled 200,000 records in 9.1 s"],
    }
    markdown = render(document)
    assert "| run 2 | 98,765 |" in markdown
    assert "| **median** | **111,110** |" in markdown
    assert "Source filled 200,000 records in 9.1 s." in markdown
    assert "median >= 100,000 records/s: **PASS**" in markdown
