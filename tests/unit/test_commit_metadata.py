"""The commit-metadata format: what a dispatcher writes, read back; anything else ignored, whole."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferq.messaging import commit_metadata
from inferq.messaging.commit_metadata import MAX_SPAN, count_done, encode, parse
from inferq.messaging.lag import unhandled


def test_what_is_encoded_is_read_back() -> None:
    assert encode({12, 13, 14, 17, 19}, 10) == "v2:2-4,7,9;"
    assert parse("v2:2-4,7,9;", 10) == {12, 13, 14, 17, 19}
    assert encode(set(), 10) == ""
    assert encode({5, 10}, 10) == ""  # at or below the commit point: nothing beyond it


@given(
    committed=st.integers(min_value=0, max_value=2**40),
    relative=st.sets(st.integers(min_value=1, max_value=MAX_SPAN), max_size=300),
)
def test_round_trip_of_anything_a_dispatcher_can_complete(committed: int, relative: set[int]) -> None:
    done = {committed + r for r in relative}
    text = encode(done, committed)
    assert len(text) <= commit_metadata.LIMIT_BYTES
    read = parse(text, committed)
    assert read <= done  # cut to the limit: fewer, never others
    if len(text) < commit_metadata.LIMIT_BYTES - 20:
        assert read == done


@pytest.mark.parametrize(
    "text",
    [
        "v2:1-999999999999;",  # a span no dispatcher tracks: would allocate forever
        f"v2:1-{MAX_SPAN + 1};",
        "v2:0;",  # the committed offset itself is never done
        "v2:-3;",
        "v2:5-2;",
        "v2:3,2;",  # not ascending
        "v2:2-4,4;",  # overlapping
        "v2:+3;",
        "v2: 3;",
        "v2:3_0;",
        "v2:\uff13;",  # a non-ASCII digit
        "v2:;",
        "v2:1,,2;",
        "v2:1-2-3;",
        "v2:x-y;",
        "v2:" + "1," * 3000 + "2;",  # over the size limit
        "v2:1",
        "hello",
    ],
)
def test_malformed_or_out_of_bounds_metadata_is_ignored_whole(text: str) -> None:
    assert parse(text, 100) == set()


def test_one_bad_part_discards_the_good_ones_too() -> None:
    # Redo rather than skip: a damaged list cannot be trusted in any part.
    assert parse("v2:1-3,99999999;", 0) == set()


def test_a_negative_commit_point_has_no_metadata() -> None:
    assert parse("v2:1;", -1) == set()
    assert parse(None, 5) == set()


def test_count_done_counts_within_a_range() -> None:
    assert count_done("v2:1-9;", 10, start=10, end=15) == 4  # 11..14
    assert count_done("v2:1-9;", 10, start=13, end=100) == 7  # 13..19


def test_unhandled_lag_leaves_out_what_is_answered_beyond_the_commit() -> None:
    # A commit stuck at 100 behind one slow call; 101..159 answered: one record still to handle.
    assert unhandled(high=160, low=0, committed=100, metadata="v2:1-59;") == 1
    assert unhandled(high=160, low=0, committed=100, metadata="garbage") == 60
    assert unhandled(high=160, low=0, committed=None, metadata="v2:1-59;") == 160
    # Retention deleted up to 150: what is done below the log start does not count twice.
    assert unhandled(high=160, low=150, committed=100, metadata="v2:1-59;") == 0
    assert unhandled(high=160, low=150, committed=100, metadata="v2:1-20;") == 10


def test_what_follows_the_terminator_is_ignored_and_metadata_without_one_is_ignored_whole():
    # confluent-kafka reads aiokafka's metadata past its end: "v2:2-4;" may come back "v2:2-4;}U" or
    # "v2:2-4;57"; without the terminator "v2:2-4" + "57" would have said offsets up to 457 done.
    assert parse("v2:2-4;}U", 10) == {12, 13, 14}
    assert parse("v2:2-4;57", 10) == {12, 13, 14}
    assert parse("v2:2-457", 10) == set()
    assert parse("v1:2-4", 10) == set()  # written before the terminator: redone, never skipped
    assert encode({12, 13, 14}, 10).endswith(";")
