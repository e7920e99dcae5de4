"""Where the tools find the checkout's files: ``infra/`` (jars pom, scenarios, install scripts).

The project root is the nearest folder at or above a starting point (the cwd by default) that holds
``infra/kafka/pom.xml``; failing that, the checkout this module lives in, so the tools still work
when run from outside the repository.
"""

from __future__ import annotations

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
_MARKER = Path("infra") / "kafka" / "pom.xml"
SCENARIO_DIR = CHECKOUT / "infra" / "scenarios"


def find_project_root(start: Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: cwd) holding ``infra/kafka/pom.xml``, else
    this checkout; raises FileNotFoundError when neither has it."""
    origin = (start or Path.cwd()).resolve()
    for folder in (origin, *origin.parents, CHECKOUT):
        if (folder / _MARKER).is_file():
            return folder
    raise FileNotFoundError(f"no project root (a folder with {_MARKER}) at or above {origin}")
