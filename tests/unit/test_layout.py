"""The layout is the architecture: product packages never import tooling, and no two packages import
each other (directly or around a loop). Imports inside functions count too: a lazy import is still
a dependency."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[2] / "services"
PRODUCT = (
    "ingest",
    "dispatcher",
    "results",
    "messaging",
    "tenancy",
    "webhooks",
    "delivery",
    "client",
    "batch",
    "telemetry",
    "tracing",
    "serving",
    "supervised",
    "log_format",
    "clock",
    "redaction",
    "settings",
    "config",
)
TOOLS = "tools"


def module_name(path: Path) -> str:
    # The folder is services/, the import package inferq (pyproject's package-dir).
    parts = ("inferq", *path.relative_to(SERVICES).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> Iterator[str]:
    """Every `inferq.*` module `path` imports, relative imports resolved."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base)
                names = [f"{prefix}.{node.module}" if node.module else prefix]
            else:
                names = [node.module or ""]
            # `from inferq.x import y` may name a submodule y: count it as an import of x.y too.
            names += [f"{names[0]}.{alias.name}" for alias in node.names]
        else:
            continue
        yield from (n for n in names if n == "inferq" or n.startswith("inferq."))


def unit_of(module: str) -> str:
    """The package a module belongs to: inferq.<pkg>, or inferq.tools.<pkg> for tooling."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == TOOLS:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def existing(module: str) -> bool:
    relative = Path(*module.split(".")[1:])
    return (SERVICES / relative).with_suffix(".py").is_file() or (
        SERVICES / relative / "__init__.py"
    ).is_file()


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(SERVICES.rglob("*.py")):
        source = unit_of(module_name(path))
        graph.setdefault(source, set())
        for target in imported(path):
            if existing(target) and unit_of(target) != source:
                graph[source].add(unit_of(target))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_product_never_imports_tooling() -> None:
    offenders = []
    for path in sorted(SERVICES.rglob("*.py")):
        module = module_name(path)
        if module.count(".") == 0 or unit_of(module).split(".")[1] not in PRODUCT:
            continue
        offenders += [f"{module} imports {t}" for t in imported(path) if t.startswith(f"inferq.{TOOLS}")]
    assert offenders == []


def test_no_import_cycles_between_packages() -> None:
    assert cycles(package_graph()) == []


def test_the_checks_see_what_they_must() -> None:
    """The graph is not vacuous: known edges are found, and a planted cycle would be reported."""
    graph = package_graph()
    assert "inferq.messaging" in graph["inferq.dispatcher"]
    assert "inferq.dispatcher" in graph["inferq.tools.simulation"]
    assert "inferq.tools.traces" in graph["inferq.tools.report"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_product_packages_sit_directly_under_services() -> None:
    beside = {
        p.stem
        for p in SERVICES.iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").is_file()) and not p.name.startswith("_")
    }
    assert beside >= set(PRODUCT) | {TOOLS}
    assert beside - set(PRODUCT) - {TOOLS, "cli"} == set(), "only product, tools and the CLI here"


def test_lazy_imports_count() -> None:
    module = SERVICES / "dispatcher" / "bootstrap.py"
    found = set(imported(module))
    # bootstrap imports the Redis pool only when coordination is "redis": still a dependency.
    assert "inferq.dispatcher.tokens.redis_pool" in found
    assert unit_of("inferq.tools.bench.cli") == "inferq.tools.bench"
    assert unit_of("inferq.dispatcher.tokens.lua") == "inferq.dispatcher"
