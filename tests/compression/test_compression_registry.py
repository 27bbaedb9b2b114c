"""The registry of compression protocols."""

import pytest

import compression
from compression import NoCompression, TopKCompression, UnknownProtocolError


def test_seed_alias_topkprotocol_resolves_to_topk():
    assert compression.get("TopKProtocol") is TopKCompression
    assert compression.canonical("TopKProtocol") == "topk"


def test_lookup_by_canonical_name_and_case_insensitively():
    assert compression.get("topk") is TopKCompression
    assert compression.get("none") is NoCompression
    assert compression.get("TOPK") is TopKCompression
    assert compression.get("topkprotocol") is TopKCompression


def test_unknown_name_error_lists_every_registered_name_and_alias():
    with pytest.raises(UnknownProtocolError) as caught:
        compression.get("topkk")
    message = str(caught.value)
    assert "unknown compression protocol 'topkk'" in message
    assert "none" in message and "topk (aliases: TopKProtocol)" in message
    assert isinstance(caught.value, ValueError)
    with pytest.raises(UnknownProtocolError, match="registered: .*topk"):
        compression.canonical("foo")


def test_names_are_sorted_canonical_names():
    assert compression.names() == sorted(compression.names())
    assert {"none", "topk"} <= set(compression.names())
    assert "TopKProtocol" not in compression.names()


def test_registering_a_taken_name_for_another_class_fails_and_changes_nothing():
    class Impostor(TopKCompression):
        pass

    with pytest.raises(ValueError, match="already registered"):
        compression.register("topk", Impostor)
    with pytest.raises(ValueError, match="already registered"):
        compression.register("impostor", Impostor, aliases=("TOPKPROTOCOL",))
    assert compression.get("topk") is TopKCompression
    assert "impostor" not in compression.names()


def test_registering_the_same_class_again_is_harmless():
    assert compression.register("topk", TopKCompression, aliases=("TopKProtocol",)) is TopKCompression
    assert compression.get("TopKProtocol") is TopKCompression


def test_registered_classes_carry_their_name():
    for name in compression.names():
        assert compression.get(name).name == name
