from inferq.dispatcher.offsets import OffsetTracker, PartitionOffsets


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
    pending = state.take_commit()
    assert pending is not None and pending.position == 1
    state.mark_committed(pending)
    assert state.take_commit() is None
    state.complete(1)
    assert state.take_commit().position == 2


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


def test_completed_offsets_beyond_the_commit_travel_in_metadata():
    from inferq.messaging.commit_metadata import parse as parse_metadata

    state = tracked(*range(10, 20))
    for o in (12, 13, 14, 17, 19):
        state.complete(o)
    assert state.committable() == 10
    text = state.metadata()
    assert text == "v2:2-4,7,9;"
    assert parse_metadata(text, 10) == {12, 13, 14, 17, 19}


def test_metadata_is_cut_to_the_limit_and_foreign_metadata_is_ignored():
    from inferq.messaging.commit_metadata import parse as parse_metadata

    state = tracked(*range(0, 5000))
    for o in range(1, 5000, 2):
        state.complete(o)
    text = state.metadata()
    assert len(text) <= 4000
    done = parse_metadata(text, 0)
    assert done and done <= set(range(1, 5000, 2))
    assert parse_metadata("hello", 0) == set()
    assert parse_metadata("v2:x-y;", 0) == set()
    assert parse_metadata(None, 0) == set()


def test_new_owner_skips_offsets_done_by_the_previous_one():
    state = PartitionOffsets("t", 0)
    state.skip_done({11, 12})
    assert state.track(10) is True
    assert state.track(11) is False
    assert state.track(12) is False
    assert state.track(13) is True
    state.complete(10)
    assert state.committable() == 13


def test_a_change_beyond_the_commit_point_is_committed_again():
    state = tracked(0, 1, 2)
    state.complete(2)
    pending = state.take_commit()
    assert (pending.position, pending.metadata) == (0, "v2:2;")
    state.mark_committed(pending)
    assert state.take_commit() is None
    state.complete(1)  # the committable offset did not move, but the metadata did
    assert state.take_commit().metadata == "v2:1-2;"


def test_completions_during_a_commit_round_trip_are_committed_next_time():
    state = tracked(0, 1, 2, 3)
    state.complete(2)
    pending = state.take_commit()  # sent with "v2:2;"
    state.complete(3)  # completes while the commit is on the wire
    state.mark_committed(pending)
    again = state.take_commit()
    assert again is not None and again.metadata == "v2:2-3;"


def test_own_running_work_carries_over_a_rebalance_that_gives_the_partition_back():
    tracker = OffsetTracker()
    old = tracker.assign("t", 0)
    for o in (10, 11, 12, 13):
        old.track(o)
    old.start(10)  # running
    old.start(11)
    old.complete(11)  # done beyond the commit
    # 12 and 13 sat in the read-ahead: dropped at revocation, to be read again.
    tracker.revoke("t", 0)
    new = tracker.assign("t", 0)
    new.adopt(old)
    # Fetched again from the commit (10): 10 runs still, 11 is done, 12 and 13 are new work.
    assert [new.track(o) for o in (10, 11, 12, 13)] == [False, False, True, True]
    assert new.committable() == 10
    old.complete(10)  # the call that was running finishes: it counts in the new assignment
    new.complete(12)
    new.complete(13)
    assert new.committable() == 14


def test_carried_over_work_that_finishes_before_it_is_fetched_again_is_skipped():
    old = PartitionOffsets("t", 0)
    old.track(5)
    old.start(5)
    old.revoked = True
    new = PartitionOffsets("t", 0)
    new.adopt(old)
    old.complete(5)  # finishes during the rebalance
    assert new.track(5) is False
    assert new.committable() == 6


def test_a_partition_the_group_never_committed_is_committable_at_its_start():
    state = PartitionOffsets("t", 0)
    state.start_at(0)
    assert state.committable() == 0  # committed even if no record ever comes: lag 0, not unknown
    state.track(0)
    state.start_at(5)  # consuming has begun: the start no longer matters
    assert state.committable() == 0
    state.complete(0)
    assert state.committable() == 1
