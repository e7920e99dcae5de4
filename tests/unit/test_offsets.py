from services.dispatcher.offsets import OffsetTracker, PartitionOffsets


def tracked(*offsets: int) -> PartitionOffsets:
    state = PartitionOffsets("t", 0)
    for o in offsets:
        state.track(o)
    return state


def test_nothing_consumed_nothing_to_commit():
    assert PartitionOffsets("t", 0).committable() is None


def test_commit_stops_at_lowest_outstanding_offset():
    state = tracked(10, 11, 12, 13)
    state.complete(12)
    state.complete(13)
    assert state.committable() == 10  # 10 and 11 still running: never commit past them
    state.complete(10)
    assert state.committable() == 11
    state.complete(11)
    assert state.committable() == 14
    assert state.in_flight == 0


def test_gaps_in_offsets_do_not_stall_commits():
    state = tracked(3, 7, 20)  # compaction or transaction markers leave gaps
    for o in (20, 3, 7):
        state.complete(o)
    assert state.committable() == 21


def test_completing_twice_or_unknown_offsets_is_harmless():
    state = tracked(5, 6)
    state.complete(5)
    state.complete(5)
    state.complete(2)
    assert state.committable() == 6
    state.complete(6)
    state.complete(6)
    assert state.committable() == 7


def test_take_commit_only_when_position_moved():
    state = tracked(0, 1)
    state.complete(0)
    assert state.take_commit() == 1
    state.mark_committed(1)
    assert state.take_commit() is None
    state.complete(1)
    assert state.take_commit() == 2


def test_completion_after_revocation_is_ignored_and_new_owner_state_is_fresh():
    tracker = OffsetTracker()
    old = tracker.assign("t", 0)
    old.track(1)
    tracker.revoke("t", 0)
    old.complete(1)
    assert old.committable() == 1  # the revoked generation never advances
    new = tracker.assign("t", 0)
    assert new is not old
    assert new.committable() is None
    assert tracker.owned() == [new]
