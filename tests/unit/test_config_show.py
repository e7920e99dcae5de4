"""`inferq config show` prints the configuration in effect with secrets masked; `inferq <service>
--help` lists the service's settings with defaults. Neither, nor a deprecation warning, ever prints
a secret."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from inferq.cli import main

BACKEND_KEY = "sk-hostile-backend-key-5678"
REDIS_PASSWORD = "hunter2-redis-in-url"  # noqa: S105 - a test value whose absence we check
SASL_PASSWORD = "sasl-pw-9f8e7d"  # noqa: S105 - a test value whose absence we check
EXTRA_PASSWORD = "librdkafka-extra-pw"  # noqa: S105 - a test value whose absence we check
WEBHOOK_SECRET = "whsec_Y29uZmlnLXNob3ctd2ViaG9vay1zZWNyZXQtdGVzdCE="  # noqa: S105 - a test value whose absence we check
SECRETS = (BACKEND_KEY, REDIS_PASSWORD, SASL_PASSWORD, EXTRA_PASSWORD, WEBHOOK_SECRET)


def _hostile_environment() -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("INFERQ_")}
    return env | {
        # An old name and its new one, both carrying a key.
        "INFERQ_BACKEND_API_KEY": BACKEND_KEY + "-old",
        "INFERQ_DISPATCHER_BACKEND_API_KEY": BACKEND_KEY,
        "INFERQ_COORDINATION": "redis",
        "INFERQ_REDIS_URL": f"redis://:{REDIS_PASSWORD}@redis.example:6379/0?password={REDIS_PASSWORD}",
        "INFERQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "INFERQ_KAFKA_SASL_USERNAME": "inferq",
        "INFERQ_KAFKA_SASL_PASSWORD": SASL_PASSWORD,
        # No security option (those are refused: test_kafka_extra_security.py); a secret-named key
        # is still masked, whatever it is.
        "INFERQ_KAFKA_EXTRA": '{"plugin.api.token": "' + EXTRA_PASSWORD + '", "linger.ms": "3"}',
        "INFERQ_DISPATCHER_BACKEND_URL": "https://backend.example/v1?api-version=2024-02-01",
        "INFERQ_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "INFERQ_BUDGET": "7",
    }


def _inferq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferq", *args],
        env=_hostile_environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("config", "show"),
        ("config", "show", "--service", "dispatcher"),
        ("dispatcher", "--help"),
        ("ingest", "--help"),
        ("results", "--help"),
    ],
)
def test_no_secret_is_ever_printed(args: tuple[str, ...]) -> None:
    done = _inferq(*args)
    assert done.returncode == 0, done.stderr
    printed = done.stdout + done.stderr
    assert [s for s in SECRETS if s in printed] == []


def test_config_show_prints_the_values_in_effect_with_secrets_masked() -> None:
    done = _inferq("config", "show", "--service", "dispatcher")
    lines = done.stdout.splitlines()
    assert lines[0] == "# dispatcher"
    assert "INFERQ_BUDGET=7" in lines
    assert "INFERQ_COORDINATION=redis" in lines
    assert "INFERQ_DISPATCHER_BACKEND_API_KEY=**********" in lines
    assert "INFERQ_KAFKA_SASL_PASSWORD=**********" in lines
    assert "INFERQ_REDIS_URL=redis://:***@redis.example:6379/0?password=***" in lines
    assert "INFERQ_REDIS_PASSWORD=" in lines  # unset
    assert 'INFERQ_KAFKA_EXTRA={"plugin.api.token": "**********", "linger.ms": "3"}' in lines
    # The old name's warning, on stderr: which name to use, and that the new one won.
    assert "INFERQ_BACKEND_API_KEY is deprecated" in done.stderr
    assert (
        "INFERQ_DISPATCHER_BACKEND_API_KEY is set too, to another value, and is the one used" in done.stderr
    )


def test_config_show_covers_each_service_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("#")] == [
        "# ingest",
        "# dispatcher",
        "# results",
    ]


def test_a_services_help_lists_its_settings_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    shown = capsys.readouterr().out
    assert "INFERQ_INGEST_MAX_BODY_BYTES  (default: 1048576)" in shown
    assert "INFERQ_BUDGET  (default: 10)" in shown
    assert "INFERQ_HTTP_LIMIT_CONCURRENCY  (default: 4096)" in shown
    assert "INFERQ_DISPATCHER_POLICY" not in shown  # the dispatcher's own, not ingest's
    with pytest.raises(SystemExit):
        main(["dispatcher", "--help"])
    assert "INFERQ_DISPATCHER_POLICY  (default: inferq)" in capsys.readouterr().out


def test_invalid_settings_are_refused_without_their_values(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERQ_HTTP_LIMIT_CONCURRENCY", "many-" + BACKEND_KEY)
    assert main(["config", "show", "--service", "ingest"]) == 2
    err = capsys.readouterr().err
    assert "limit_concurrency" in err
    assert BACKEND_KEY not in err
