"""Settings the services cannot use stop them with one line per problem, never the value given
(a key or password in the same input would be quoted by pydantic's own message)."""

from __future__ import annotations

import pytest

from inferq.cli import main

KEY_GIVEN = "sk-live-0123456789abcdef"


@pytest.mark.parametrize(
    ("command", "env", "says"),
    [
        (
            ["dispatcher"],
            {
                "INFERQ_DISPATCHER_BACKEND_API_KEY": KEY_GIVEN,
                "INFERQ_DISPATCHER_TIER_BACKENDS": '{"LOW": ["nowhere"]}',
            },
            "LOW lists unknown backends ['nowhere']",
        ),
        (
            ["dispatcher"],
            {"INFERQ_DISPATCHER_BACKEND_API_KEY": KEY_GIVEN, "INFERQ_BUDGET": "ten"},
            "INFERQ_BUDGET: Input should be",
        ),
        (
            # The key itself in the value refused (a key put in the setting, not in its variable).
            ["dispatcher"],
            {"INFERQ_DISPATCHER_BACKENDS": '{"x": {"url": "http://a/v1", "api_key": "' + KEY_GIVEN + '"}}'},
            "backends.x.api_key: Extra inputs are not permitted",
        ),
        (
            ["dispatcher"],
            {"INFERQ_REDIS_PASSWORD": KEY_GIVEN, "INFERQ_REDIS_CALL_TIMEOUT_S": "4.9"},
            "call_timeout_s (4.9) must be below lease_ttl_s / 3",
        ),
        (
            ["results"],
            {"INFERQ_REDIS_PASSWORD": KEY_GIVEN, "INFERQ_RESULTS_PORT": "x"},
            "port: Input should be",
        ),
        (
            # Open mode's webhook secret must be a Standard Webhooks one (a raw string is refused).
            ["results"],
            {"INFERQ_WEBHOOK_SECRET": KEY_GIVEN},
            "INFERQ_WEBHOOK_SECRET must be 'whsec_' and the base64 of 24-64 random bytes",
        ),
        (
            ["ingest"],
            {"INFERQ_WEBHOOK_SECRET": "whsec_" + KEY_GIVEN},
            "INFERQ_WEBHOOK_SECRET must be 'whsec_' and the base64 of 24-64 random bytes",
        ),
    ],
)
def test_invalid_settings_say_what_and_exit_2_without_the_values(monkeypatch, capsys, command, env, says):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"inferq {command[0]}: invalid settings:\n"), err
    assert says in err
    assert KEY_GIVEN[:4] not in err and "input_value" not in err


def test_a_variable_that_is_not_json_names_its_field_not_its_value(monkeypatch, capsys):
    monkeypatch.setenv(
        "INFERQ_DISPATCHER_BACKENDS", '{"cheap": {"url": "https://a/v1", "api_key": "' + KEY_GIVEN
    )
    assert main(["dispatcher"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("inferq dispatcher: invalid settings:\n"), err
    assert '"backends"' in err
    assert KEY_GIVEN[:4] not in err
