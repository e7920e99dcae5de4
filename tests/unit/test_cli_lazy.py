"""`inferq --help` and `--version` load no client library; each command loads only its own module;
a tooling command without the tooling's packages says how to install them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from inferq.cli import COMMANDS, ToolingMissingError, build_parser, main

HEAVY = ("confluent_kafka", "aiokafka", "aiohttp", "uvicorn", "opentelemetry.sdk", "pydantic", "starlette")


def _loaded_after(code: str) -> set[str]:
    """Top modules imported by a fresh interpreter running `code` (sys.modules printed at exit)."""
    script = textwrap.dedent(
        f"""
        import atexit, sys
        atexit.register(lambda: print("\\n".join(sorted(sys.modules)), file=sys.stderr))
        {code}
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    return set(done.stderr.split())


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_load_no_client_library(flag: str) -> None:
    loaded = _loaded_after(f"from inferq.cli import main; main([{flag!r}])")
    assert "inferq.cli" in loaded  # the probe saw the command run
    assert [m for m in HEAVY if m in loaded] == []
    assert not [m for m in loaded if m.startswith("inferq.") and m != "inferq.cli"]


def test_a_service_command_loads_no_tooling() -> None:
    loaded = _loaded_after("from inferq.cli import main; main(['results', '--help'])")
    assert "inferq.results.cli" in loaded
    assert not [m for m in loaded if m.startswith("inferq.tools")]


def test_version_names_the_installed_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["--version"])
    assert ended.value.code == 0
    from importlib.metadata import version

    assert capsys.readouterr().out.strip() == f"inferq {version('inferq')}"


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = capsys.readouterr().out
    assert [name for name in COMMANDS if name not in shown] == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_registers_under_its_own_name(command: str) -> None:
    chosen = build_parser(command)._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    # The module's own parser, not the help-only stand-in the other commands get.
    assert chosen.add_help
    stand_in = build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    assert not stand_in.add_help


def test_a_tooling_command_without_its_packages_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing(name: str) -> None:
        raise ModuleNotFoundError("No module named 'rich'", name="rich")

    monkeypatch.setattr("inferq.cli.import_module", missing)
    assert main(["top"]) == 2
    assert capsys.readouterr().err.strip() == "inferq top needs rich: pip install 'inferq[tools]'"
    with pytest.raises(ToolingMissingError):
        build_parser("ingest")


def test_a_tooling_package_missing_when_the_command_runs_says_the_same(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(_: object) -> int:
        raise ModuleNotFoundError("No module named 'matplotlib.pyplot'", name="matplotlib.pyplot")

    args = build_parser("top").parse_args(["top"])
    args.func = run
    monkeypatch.setattr("inferq.cli.build_parser", lambda _command=None: _Fixed(args))
    assert main(["top"]) == 2
    assert "needs matplotlib: pip install 'inferq[tools]'" in capsys.readouterr().err


def test_another_missing_module_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise ModuleNotFoundError("No module named 'confluent_kafka'", name="confluent_kafka")

    monkeypatch.setattr("inferq.cli.import_module", missing)
    with pytest.raises(ModuleNotFoundError):
        main(["ingest"])


class _Fixed:
    """A parser stand-in that returns the same parsed arguments."""

    def __init__(self, args: object) -> None:
        self.args = args

    def parse_args(self, _words: object) -> object:
        return self.args
