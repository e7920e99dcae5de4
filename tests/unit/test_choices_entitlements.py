"""`n`, `logprobs` and `top_logprobs` as a tenant's entitlements (n with a cap, top_logprobs with
logprobs, the defaults free), in the tenants file, and in the dispatcher's token estimate (each
choice is a whole answer)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferq.dispatcher.rate_budget import DEFAULT_COMPLETION_TOKENS, estimate_tokens
from inferq.dispatcher.starting import request_cost
from inferq.messaging import limits
from inferq.messaging.tiers import Tier
from tests.support.work import a_work
from tests.unit.test_tenancy_entitlements import NARROW, check, request
from tests.unit.test_tenancy_loading import entry, problems_of

CAPPED = replace(NARROW, params={**NARROW.params, "n": 2, "logprobs": None})


def test_n_within_the_tenants_cap_is_allowed_and_over_it_refused() -> None:
    assert check(request(params={"n": 2}), CAPPED).allowed
    verdict = check(request(params={"n": 3}), CAPPED)
    assert [(p.field, p.problem) for p in verdict.problems] == [("params.n", "over this tenant's cap, 2")]


def test_top_logprobs_comes_with_logprobs_and_not_without() -> None:
    assert check(request(params={"logprobs": True, "top_logprobs": 5}), CAPPED).allowed
    verdict = check(request(params={"logprobs": True, "top_logprobs": 5}))
    assert {p.field for p in verdict.problems} == {"params.logprobs", "params.top_logprobs"}


@pytest.mark.parametrize(
    ("params", "allowed"),
    [
        ({"n": 1}, True),
        ({"logprobs": False}, True),
        ({"n": 2}, False),
        ({"n": True}, False),
        ({"logprobs": 0}, False),
    ],
    ids=repr,
)
def test_the_defaults_need_no_entitlement_and_nothing_that_only_equals_them(
    params: dict[str, object], allowed: bool
) -> None:
    """A record written straight to Kafka with n 1 asks for nothing; ``true`` is not 1."""
    assert check(request(params=params)).allowed is allowed


def test_an_n_cap_must_be_a_whole_number_within_the_bound() -> None:
    assert replace(NARROW, params={"n": limits.MAX_CHOICES}).params["n"] == limits.MAX_CHOICES
    for cap in (0, limits.MAX_CHOICES + 1):
        with pytest.raises(ValueError, match=r"params\.n cap must be within 1\.\.8"):
            replace(NARROW, params={"n": cap})
    [problem] = problems_of(entry(entitlements="[tenants.entitlements.params]\nn = 1.5"))
    assert "an integer for n" in problem
    [problem] = problems_of(entry(entitlements="[tenants.entitlements.params]\nn = 9"))
    assert "cap must be within 1..8" in problem
    [problem] = problems_of(entry(entitlements="[tenants.entitlements.params]\ntop_logprobs = 3"))
    assert "must be true or false" in problem


def test_the_estimate_counts_each_choice_as_a_whole_answer() -> None:
    assert estimate_tokens([400], 50, None, choices=3) == 100 + 150
    assert estimate_tokens([400], None, None, choices=2) == 100 + 2 * DEFAULT_COMPLETION_TOKENS
    assert estimate_tokens([400], 50, 7, choices=8) == 7  # the record's own estimate wins

    work = a_work(Tier.HIGH)
    work.params.update({"max_tokens": 10, "n": 4})
    assert request_cost(work) == 1 + 40
    work.params["n"] = "4"  # not a whole number: never written past record_rules, one answer here
    assert request_cost(work) == 1 + 10
