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
    for name in (None, 7, ["topk"], {"name": "topk"}):  # no name (a list or a dict is not even a dict key)
        with pytest.raises(UnknownProtocolError, match="registered: .*topk"):
            compression.get(name)


ALL_CODECS = ["countsketch", "fp16", "int8", "none", "qsgd", "randk", "ternary", "topk"]


def test_names_are_sorted_canonical_names_of_every_codec():
    assert compression.names() == sorted(compression.names())
    assert set(ALL_CODECS) <= set(compression.names())
    assert "TopKProtocol" not in compression.names()


def test_unknown_name_error_lists_every_codec_dense_baseline_and_topk_first():
    with pytest.raises(UnknownProtocolError) as caught:
        compression.get("zip")
    listing = str(caught.value).split("registered: ")[1]
    assert listing.startswith("none, topk (aliases: TopKProtocol), ")
    for name in ALL_CODECS:
        assert name in listing


def test_every_module_of_the_package_is_imported_so_a_codec_file_registers_itself():
    import pkgutil
    import sys

    for module in pkgutil.iter_modules(compression.__path__):
        assert f"compression.{module.name}" in sys.modules


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


def test_a_codec_module_reloaded_registers_its_new_class_under_its_name(tmp_path, monkeypatch):
    """A codec under development, reloaded (importlib.reload, a notebook's autoreload) or its notebook cell run
    again, defines its class anew: the new definition takes its name, not a ValueError, and is what `get` gives."""
    import importlib
    import sys

    from compression import registry

    monkeypatch.setattr(registry, "_classes", dict(registry._classes))  # the name goes with the test
    monkeypatch.setattr(registry, "_canonical_of", dict(registry._canonical_of))
    (tmp_path / "mycodec_reloaded.py").write_text(
        "import compression\n\n"
        "class Mine(compression.NoCompression):\n    name = 'mine_reloaded'\n\n"
        "compression.register('mine_reloaded', Mine, aliases=('MineProtocol',))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mycodec_reloaded", raising=False)
    module = importlib.import_module("mycodec_reloaded")
    first = module.Mine
    importlib.reload(module)
    assert module.Mine is not first
    assert compression.get("mine_reloaded") is module.Mine and compression.get("MineProtocol") is module.Mine
    sys.modules.pop("mycodec_reloaded")


def test_another_class_of_the_same_name_or_of_the_same_module_cannot_take_a_registered_name(monkeypatch):
    """Only the same class defined again (same module and qualified name) takes a name over: a class named like
    the incumbent in another module, or another class of the incumbent's module, is a different codec."""
    from compression import registry

    monkeypatch.setattr(registry, "_classes", dict(registry._classes))
    monkeypatch.setattr(registry, "_canonical_of", dict(registry._canonical_of))
    namesake = type("TopKCompression", (TopKCompression,), {"__module__": "someone_elses.topk"})
    with pytest.raises(ValueError, match="already registered"):
        compression.register("topk", namesake)
    neighbour = type("TopKNeighbour", (TopKCompression,), {"__module__": TopKCompression.__module__})
    with pytest.raises(ValueError, match="already registered"):
        compression.register("topk", neighbour)
    assert compression.get("topk") is TopKCompression


def test_two_lambdas_or_partials_under_one_name_are_two_codecs_not_one_defined_again(monkeypatch):
    """Every lambda of a module has the qualified name `<lambda>` and a partial has none: neither names a single
    definition, so a second one under a taken name is refused, while the same object again is harmless."""
    import functools

    from compression import registry

    monkeypatch.setattr(registry, "_classes", dict(registry._classes))
    monkeypatch.setattr(registry, "_canonical_of", dict(registry._canonical_of))
    first, second = (lambda *a, **k: TopKCompression(*a, **k)), (lambda *a, **k: TopKCompression(*a, **k))
    compression.register("lambda_codec", first)
    compression.register("lambda_codec", first)
    with pytest.raises(ValueError, match="already registered"):
        compression.register("lambda_codec", second)
    half, third = functools.partial(TopKCompression, 0.5), functools.partial(TopKCompression, 0.3)
    compression.register("partial_codec", half)
    with pytest.raises(ValueError, match="already registered"):
        compression.register("partial_codec", third)
    assert compression.get("lambda_codec") is first and compression.get("partial_codec") is half
