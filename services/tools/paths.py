"""Where the tools find the project's files: ``infra/`` (jars poms, scenarios, install scripts).

The project root is the nearest folder at or above a starting point (the cwd by default) that holds
``infra/kafka/pom.xml``; failing that, the folder holding the ``infra/`` this install ships (the
checkout for an editable install; the installed package, as ``inferq.infra``, for a wheel), so the
tools still work when run from outside the repository.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

# An install from a wheel unpacks files, so the packaged infra is a real folder.
INFRA = Path(str(files("inferq.infra")))
CHECKOUT = INFRA.parent
_MARKER = Path("infra") / "kafka" / "pom.xml"
SCENARIO_DIR = INFRA / "scenarios"


def find_project_root(start: Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: cwd) holding ``infra/kafka/pom.xml``, else
    the one this install ships; raises FileNotFoundError when neither has it."""
    origin = (start or Path.cwd()).resolve()
    for folder in (origin, *origin.parents):
        if (folder / _MARKER).is_file():
            return folder
    if (INFRA / "kafka" / "pom.xml").is_file():
        return CHECKOUT
    raise FileNotFoundError(f"no project root (a folder with {_MARKER}) at or above {origin}")
