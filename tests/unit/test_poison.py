import pytest

from inferq.dispatcher.poison import PoisonWatch
from tests.support.clock import ManualClock


def test_an_odd_bad_record_is_not_an_alarm_but_a_bad_stream_is_once():
    clock = ManualClock(0)
    watch = PoisonWatch(clock.seconds, threshold=0.2, min_records=20)
    alarms = [watch.record("t", poison=(i % 10 == 0)) for i in range(100)]  # 10% poison
    assert not any(alarms)
    alarms = [watch.record("t", poison=True) for _ in range(100)]  # a producer switched format
    assert alarms.count(True) == 1
    assert watch.ratio("t") > 0.5


def test_the_alarm_rearms_after_recovery_and_old_records_leave_the_window():
    clock = ManualClock(0)
    watch = PoisonWatch(clock.seconds, window_s=10, threshold=0.2, min_records=5)
    assert any(watch.record("t", poison=True) for _ in range(5))
    clock.now_ms = 11_000
    assert not any(watch.record("t", poison=False) for _ in range(10))  # the bad ones aged out
    assert watch.ratio("t") == 0.0
    assert any(watch.record("t", poison=True) for _ in range(10))


def test_the_poison_watch_keeps_seconds_not_records() -> None:
    clock = ManualClock(0)
    watch = PoisonWatch(clock.seconds, window_s=60)
    for i in range(100_000):
        clock.now_ms = i  # 1,000 records a second for 100 s
        watch.record("t", poison=i % 2 == 0)
    window = watch._windows["t"]
    assert len(window.seconds) <= 62
    assert window.records <= 62_000
    assert watch.ratio("t") == pytest.approx(0.5, abs=0.01)
