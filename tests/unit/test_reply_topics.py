"""The reply_to allow-list: only the pipeline's own reply topics, never a request, retry or DLQ topic."""

from __future__ import annotations

import pytest

from inferq.messaging.reply_topics import is_allowed_reply_topic
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicNames

TOPICS = TopicNames("inferq")


@pytest.mark.parametrize(
    "topic",
    ["inferq.results", "inferq.results.eu-west-1", "inferq.results.a", "inferq.results." + "x" * 32],
)
def test_the_results_topic_and_regional_reply_topics_are_allowed(topic):
    assert is_allowed_reply_topic(topic, TOPICS)


@pytest.mark.parametrize(
    "topic",
    [
        "bad/name",
        "inferq.requests.high",
        "inferq.requests.low",
        "inferq.retry",
        "inferq.dlq",
        "other.results",
        "inferq.results.",
        "inferq.results.EU",
        "inferq.results.eu_west",
        "inferq.results.eu.west",
        "inferq.results." + "x" * 33,
        "inferq.results.retry",
        "inferq.results.dlq",
        "inferq.results.requests",
        "inferq.results.results",
        "inferq.resultsx",
        "inferqXresults",
        "",
        "inferq.results\n",
        "inferq.results.eu\n",
        "inferq.results.ü",
    ],
)
def test_anything_else_is_refused(topic):
    assert not is_allowed_reply_topic(topic, TOPICS)


def test_a_prefix_with_regex_characters_is_matched_literally():
    topics = TopicNames("a.b")
    assert is_allowed_reply_topic("a.b.results.eu", topics)
    assert not is_allowed_reply_topic("aXb.results.eu", topics)


def test_a_nested_pipeline_cannot_be_reached_through_a_region():
    # A pipeline whose prefix is "inferq.results" has its retry and DLQ topics under our reply prefix.
    nested = TopicNames("inferq.results")
    for topic in (nested.retry, nested.dlq, nested.results):
        assert not is_allowed_reply_topic(topic, TOPICS)
    assert not is_allowed_reply_topic(nested.requests(Tier.HIGH), TOPICS)


def test_a_name_over_kafkas_limit_is_refused_even_under_a_long_prefix():
    topics = TopicNames("p" * 230)
    assert is_allowed_reply_topic(topics.results + ".eu", topics)
    assert not is_allowed_reply_topic(topics.results + "." + "e" * 20, topics)
