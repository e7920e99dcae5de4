from inferq.dispatcher.adaptive import AdaptiveBudget, AdaptivePolicy
from tests.support.clock import ManualClock


def budget(**kw) -> tuple[AdaptiveBudget, ManualClock]:
    clock = ManualClock(0)
    return AdaptiveBudget(AdaptivePolicy(max_budget=10, **kw), clock.seconds), clock


def window(ab: AdaptiveBudget, clock: ManualClock, latency: float, n: int = 10, model: str = "m") -> None:
    for _ in range(n):
        ab.record_success(model, latency)
    clock.advance(s=ab.policy.window_s)
    ab.tick()


def test_overload_cuts_fast_but_once_per_burst():
    ab, clock = budget()
    for _ in range(10):
        ab.record_overload()  # one burst of 429s
    assert ab.effective == 7
    clock.advance(s=1.0)
    ab.record_overload()
    assert ab.effective == 4  # floor(7 * 0.7)


def test_latency_rise_cuts_in_proportion_and_recovery_is_additive():
    ab, clock = budget()
    window(ab, clock, 0.5)  # sets the baseline
    assert ab.baseline("m") == 0.5
    window(ab, clock, 1.0)  # twice as slow: half the concurrency
    assert ab.effective == 5
    window(ab, clock, 1.0)  # still slow: stays, does not compound
    assert ab.effective == 5
    for expected in (6, 7, 8, 9, 10, 10):
        window(ab, clock, 0.5)
        assert ab.effective == expected


def test_a_rise_within_twenty_percent_is_not_a_cut():
    ab, clock = budget()
    window(ab, clock, 0.5)
    window(ab, clock, 0.59)
    assert ab.effective == 10


def test_never_below_min_budget_and_few_samples_are_ignored():
    ab, clock = budget(min_budget=2)
    for _ in range(20):
        ab.record_overload()
        clock.advance(s=2)
    assert ab.effective == 2
    ab2, clock2 = budget()
    window(ab2, clock2, 0.5)
    window(ab2, clock2, 5.0, n=2)  # two slow samples are noise, not a trend
    assert ab2.effective == 10


def test_models_have_their_own_baselines():
    ab, clock = budget()
    for _ in range(10):
        ab.record_success("fast", 0.5)
        ab.record_success("accurate", 2.8)
    clock.advance(s=5)
    ab.tick()
    window(ab, clock, 2.8, model="accurate")
    window(ab, clock, 0.5, model="fast")
    assert ab.effective == 10


def test_the_models_learnt_are_bounded() -> None:
    from inferq.dispatcher.adaptive import MAX_MODELS, AdaptiveBudget, AdaptivePolicy

    budget = AdaptiveBudget(AdaptivePolicy(max_budget=10, min_budget=1, window_s=5.0), lambda: 0.0)
    for i in range(MAX_MODELS * 10):
        budget.record_success(f"model-{i}", 0.1)
    assert budget.baseline(f"model-{MAX_MODELS * 10 - 1}") is None
    budget.record_success("model-0", 0.1)  # a known one is still learnt
    assert len(budget._window.counts) == MAX_MODELS
