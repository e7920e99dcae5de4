"""The tenants file: what a valid one grants, and every problem named at its line, never quoting a
key or a hash."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferq.messaging import limits
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicNames
from inferq.tenancy.errors import TenantsFileError
from inferq.tenancy.held import HeldLimits
from inferq.tenancy.keys import hash_key, key_digest, new_key
from inferq.tenancy.loading import MAX_FILE_BYTES, load_tenants, parse_tenants
from inferq.tenancy.model import DEFAULT_PARAMS, DEFAULT_ROLES
from inferq.tenancy.secret_forms import new_record_key, new_webhook_secret
from tests.support.tenants import TenantSpec, tenants_toml

EXAMPLE = Path(__file__).resolve().parents[2] / "infra" / "tenants.example.toml"
HASH = hash_key("iq_test-key")


def problems_of(text: str, **kwargs) -> list[str]:
    with pytest.raises(TenantsFileError) as refused:
        parse_tenants(text, "t.toml", **kwargs)
    lines = str(refused.value).splitlines()
    assert len(lines) == len(refused.value.problems)
    assert HASH not in str(refused.value) and HASH[7:] not in str(refused.value)
    return lines


def entry(body: str = "", *, name: str = "acme", entitlements: str = "") -> str:
    """Nine lines: the header on 1, `body` on 5, the entitlements' own lines from 9."""
    weight = "# weight below" if body.startswith("weight") else "weight = 1"
    return (
        f'[[tenants]]\nname = "{name}"\nkeys = ["{HASH}"]\n{weight}\n{body}'
        f'\n[tenants.entitlements]\nmax_tier = "MEDIUM"\nscenarios = ["realtime_chat"]\n{entitlements}'
    )


def test_the_example_file_refuses_its_placeholders_by_name():
    with pytest.raises(TenantsFileError) as refused:
        load_tenants(EXAMPLE, topics=TopicNames("inferq"))
    problems = [p.problem for p in refused.value.problems]
    assert len(problems) == 3, problems
    assert all("the example file's placeholder" in p for p in problems)
    assert [p.split(":")[0] for p in problems] == ["service.record_keys", "webhook_secret", "record_keys"]


def test_the_example_file_is_valid_and_documents_every_field():
    text = EXAMPLE.read_text()
    text = text.replace("whsec_replace-me-with-inferq-tenants-webhook-secret-output", new_webhook_secret())
    text = text.replace("irk_replace-me-with-inferq-tenants-record-key-output", new_record_key())
    directory = parse_tenants(text, EXAMPLE, topics=TopicNames("inferq"))
    assert len(directory.service_record_keys) == 1
    assert directory.default_limits == HeldLimits()
    app = directory.get("companion-app")
    assert app is not None and len(app.key_digests) == 2
    assert (app.weight, app.max_concurrency, app.requests_per_minute, app.rate_burst) == (3.0, 6, 1200, 200)
    e = app.entitlements
    assert e.max_tier is Tier.HIGH
    assert "realtime_chat" in e.scenarios and "batch" not in e.scenarios
    assert e.params["max_tokens"] == 1024 and e.params["temperature"] is None
    assert "presence_penalty" not in e.params
    assert e.roles == {"user", "assistant", "system"}
    assert "inferq.results.eu" in e.reply_topics and "hooks.companion.example" in e.callback_hosts
    batch = directory.get("nightly-batch")
    assert batch is not None and batch.entitlements.roles == DEFAULT_ROLES
    assert batch.rate_burst == 600  # a minute's worth by default
    assert batch.entitlements.max_deadline_ms == limits.MAX_DEADLINE_MS
    assert app.limits == HeldLimits(event_streams=100, webhooks_in_flight=8)
    assert batch.limits == HeldLimits() and batch.record_keys == ()
    assert len(app.record_keys) == 1 and app.webhook_secret is not None
    fields = ["name", "keys", "weight", "max_concurrency", "requests_per_minute", "burst", "max_tier"]
    fields += ["scenarios", "models", "roles", "max_estimated_tokens", "max_deadline_ms", "reply_topics"]
    for name in [*fields, "callback_hosts", *limits.ALLOWED_PARAMS, *HeldLimits.names()]:
        assert re.search(rf"\b{name}\b", text), name


def test_a_minimal_entry_gets_the_narrow_defaults():
    directory = parse_tenants(entry())
    tenant = directory.get("acme")
    assert tenant is not None
    assert tenant.key_digests == (key_digest("iq_test-key"),)
    assert (tenant.requests_per_minute, tenant.max_concurrency) == (None, None)
    e = tenant.entitlements
    assert (e.models.describe(), e.reply_topics.describe(), e.callback_hosts.describe()) == ("none",) * 3
    # Only the parameters that name the end user or label the request, which steer no model.
    assert dict(e.params) == dict.fromkeys(DEFAULT_PARAMS) and e.roles == DEFAULT_ROLES


def test_an_empty_file_is_valid_with_no_tenant():
    assert len(parse_tenants("")) == 0


def test_a_syntax_error_names_its_line_and_column():
    [line] = problems_of('[[tenants]]\nname = "acme"\nweight = \n')
    assert line.startswith("t.toml:3:10: ") and "TOML syntax: Invalid value" in line


def test_semantic_errors_name_the_field_line_and_the_entry():
    text = entry(name="first") + "\n" + entry("weight = -2", name="second")
    assert problems_of(text) == [
        "t.toml:14: [[tenants]] #2 'second' (line 10): weight: must be > 0 and at most 1e+06, got -2"
    ]


@pytest.mark.parametrize(
    ("body", "entitlements", "field", "line"),
    [
        ("weight = 0", "", "weight: must be > 0", 5),
        ("", 'max_tier = "TOP"\n', "", 0),
        ("max_concurrency = 0\n", "", "max_concurrency: must be within 1..", 5),
        ("requests_per_minute = true\n", "", "requests_per_minute: must be an integer", 5),
        ("burst = 5\n", "", "burst: needs requests_per_minute", 5),
        ("colour = 1\n", "", "colour: unknown field", 5),
        ("", 'models = ["a b"]\n', "entitlements.models[0]: is not a valid name", 9),
        ("", 'roles = ["root"]\n', "entitlements.roles: must be a list of", 9),
        ("", "max_deadline_ms = 0\n", "entitlements.max_deadline_ms: must be within 1..", 9),
        ("", "max_estimated_tokens = 2000001\n", "entitlements.max_estimated_tokens: must be within 0..", 9),
        ("", 'callback_hosts = ["*"]\n', "entitlements.callback_hosts[0]: is not a valid name", 9),
        ("", 'reply_topics = ["a topic"]\n', "entitlements.reply_topics[0]: is not a valid name", 9),
        ("", "sudo = true\n", "entitlements.sudo: unknown field", 9),
        (
            "",
            "[tenants.entitlements.params]\nstream = true\n",
            "entitlements.params.stream: not a parameter",
            10,
        ),
        (
            "",
            "[tenants.entitlements.params]\ntemperature = 3\n",
            "params.temperature: cap must be within 0..2",
            10,
        ),
        (
            "",
            "[tenants.entitlements.params]\nmax_tokens = 1.5\n",
            "params.max_tokens: must be true, false",
            10,
        ),
        ("", "[tenants.entitlements.params]\nseed = 7\n", "params.seed: must be true or false", 10),
    ],
)
def test_each_bad_field_is_named_at_its_line(body, entitlements, field, line):
    text = entry(body, entitlements=entitlements)
    if not field:  # a duplicate max_tier is TOML's own error
        [problem] = problems_of(text)
        assert "TOML syntax" in problem
        return
    [problem] = problems_of(text)
    assert problem.startswith(f"t.toml:{line}: [[tenants]] #1 'acme' (line 1): "), problem
    assert field in problem


def test_required_fields_are_named():
    lines = problems_of('[[tenants]]\nname = "acme"\n')
    assert [line.split(": ", 2)[-1].split(":")[0] for line in lines] == ["keys", "weight", "entitlements"]
    lines = problems_of(
        entry().replace('scenarios = ["realtime_chat"]\n', "").replace('max_tier = "MEDIUM"\n', "")
    )
    assert any("entitlements.max_tier: is required" in line for line in lines)
    assert any("entitlements.scenarios: is required" in line for line in lines)


def test_a_duplicate_name_and_a_shared_key_are_refused():
    dup = problems_of(entry() + "\n" + entry().replace(HASH, hash_key("iq_other")))
    assert dup == ["t.toml:11: [[tenants]] #2 'acme' (line 10): name: duplicate name: entry #1 has it too"]
    shared = problems_of(entry() + "\n" + entry(name="other"))
    assert shared == [
        "t.toml:12: [[tenants]] #2 'other' (line 10): keys: a key hash of entry #1 is listed here too"
    ]


def test_a_key_pasted_instead_of_its_hash_is_refused_without_being_repeated():
    key = new_key()
    lines = problems_of(entry().replace(HASH, key))
    assert len(lines) == 1 and "is a key, not its hash" in lines[0] and key not in lines[0]
    assert lines[0].startswith("t.toml:3:")


def test_keys_count_and_repeats():
    assert "keys: must be a list of 1 to 2" in problems_of(entry().replace(f'["{HASH}"]', "[]"))[0]
    three = ", ".join(f'"{hash_key(str(i))}"' for i in range(3))
    assert "keys: must be a list of 1 to 2" in problems_of(entry().replace(f'"{HASH}"', three))[0]
    assert (
        "the same hash is listed twice" in problems_of(entry().replace(f'"{HASH}"', f'"{HASH}", "{HASH}"'))[0]
    )


def test_unknown_top_level_keys_and_a_tenants_key_that_is_not_tables():
    assert problems_of("version = 2\n") == [
        "t.toml:1: unknown key 'version' (the file holds [[tenants]] tables, [limits] and [service])"
    ]
    assert problems_of("tenants = 3\n") == ["t.toml:1: 'tenants' must be [[tenants]] tables"]


def test_reply_topics_must_pass_the_pipelines_rule_when_its_prefix_is_known():
    text = entry(entitlements='reply_topics = ["inferq.results.eu", "inferq.requests.high"]\n')
    assert parse_tenants(text).get("acme") is not None  # no prefix: the names only
    [problem] = problems_of(text, topics=TopicNames("inferq"))
    assert "entitlements.reply_topics[1]" in problem


def test_an_inline_array_of_tenants_is_read_and_its_problems_name_the_entry_only():
    text = tenants_toml(TenantSpec("a"))
    assert parse_tenants(text).get("a") is not None
    inline = (
        f'tenants = [{{name = "x", keys = ["{HASH}"], weight = 0, '
        'entitlements = {max_tier = "LOW", scenarios = []}}]\n'
    )
    [problem] = problems_of(inline)
    assert problem == "t.toml: [[tenants]] #1 'x': weight: must be > 0 and at most 1e+06, got 0"


def test_files_that_cannot_be_read_are_named(tmp_path):
    with pytest.raises(TenantsFileError, match="cannot read the tenants file: No such file"):
        load_tenants(tmp_path / "missing.toml")
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(TenantsFileError, match="larger than"):
        load_tenants(big)
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b"# ok\n# caf\xe9\n")
    with pytest.raises(TenantsFileError) as refused:
        load_tenants(latin)
    assert str(refused.value) == f"{latin}:2: not UTF-8 text"
