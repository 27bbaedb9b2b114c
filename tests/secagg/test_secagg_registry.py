"""The mask-protocol registry: config names and the seed framework's aliases resolve; typos fail loudly."""

import pytest

import secagg
from secagg import DHProtocol, NoMasking, SecAggPlusProtocol, SecAggProtocol, UnknownProtocolError


def test_canonical_names_and_aliases_resolve():
    assert secagg.get("dh") is SecAggProtocol is DHProtocol
    assert secagg.get("DHProtocol") is DHProtocol
    assert secagg.get("secaggplus") is secagg.get("SecAggPlusProtocol") is SecAggPlusProtocol
    assert secagg.get("none") is NoMasking
    assert secagg.canonical("DHProtocol") == "dh"


def test_lookup_falls_back_to_case_insensitive():
    assert secagg.get("DH") is DHProtocol
    assert secagg.get("dhprotocol") is DHProtocol


def test_unknown_name_lists_every_registered_name_and_alias():
    with pytest.raises(UnknownProtocolError) as info:
        secagg.get("foo")
    message = str(info.value)
    assert "'foo'" in message
    assert "dh (aliases: DHProtocol)" in message and "none" in message
    assert "secaggplus (aliases: SecAggPlusProtocol)" in message
    for name in (None, 7, ["dh"], {"name": "dh"}):  # no name (a list or a dict is not even a dict key)
        with pytest.raises(UnknownProtocolError, match="registered: .*dh"):
            secagg.get(name)


def test_unknown_protocol_error_is_a_value_error():
    assert issubclass(UnknownProtocolError, ValueError)


def test_names_are_the_canonical_names():
    assert {"dh", "secaggplus", "none"} <= set(secagg.names())
    assert "DHProtocol" not in secagg.names()


def test_a_taken_name_cannot_be_registered_to_another_class():
    with pytest.raises(ValueError, match="already registered"):
        secagg.register("dh", object)
    with pytest.raises(ValueError, match="already registered"):
        secagg.register("fresh", object, aliases=("DHProtocol",))
    assert "fresh" not in secagg.names()
    assert secagg.get("DHProtocol") is DHProtocol


def test_registering_a_protocol_again_under_its_own_names_changes_nothing():
    """A module imported twice (or a plugin registering what is already there) re-registers the same class under
    the same names: that is no clash, and every name still resolves as before."""
    secagg.register("dh", DHProtocol, aliases=("DHProtocol",))
    assert secagg.get("dh") is secagg.get("DHProtocol") is secagg.get("DH") is DHProtocol
    assert secagg.names().count("dh") == 1


def test_a_protocol_module_reloaded_registers_its_new_class_under_its_names(tmp_path, monkeypatch):
    """A mask protocol under development, reloaded (importlib.reload, a notebook's autoreload), defines its class
    anew: the new definition takes its names, as a reloaded codec's does, while another class of its module or a
    namesake from another module stays refused."""
    import importlib
    import sys

    from secagg import registry

    monkeypatch.setattr(registry, "_PROTOCOLS", dict(registry._PROTOCOLS))
    monkeypatch.setattr(registry, "_ALIASES", dict(registry._ALIASES))
    (tmp_path / "myproto_reloaded.py").write_text(
        "import secagg\n\n"
        "class Mine:\n    masks = False\n\n"
        "secagg.register('mine_reloaded', Mine, aliases=('MineProtocol',))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "myproto_reloaded", raising=False)
    module = importlib.import_module("myproto_reloaded")
    first = module.Mine
    importlib.reload(module)
    assert module.Mine is not first
    assert secagg.get("mine_reloaded") is module.Mine and secagg.get("MineProtocol") is module.Mine
    neighbour = type("Neighbour", (), {"masks": False, "__module__": "myproto_reloaded"})
    namesake = type("Mine", (), {"masks": False, "__module__": "someone_elses"})
    for other in (neighbour, namesake):
        with pytest.raises(ValueError, match="already registered"):
            secagg.register("mine_reloaded", other)
    sys.modules.pop("myproto_reloaded")


def test_a_name_differing_only_in_case_cannot_take_over_a_spelling():
    """`Dh` was accepted beside `dh`, and then `DH` (and `Dh`) resolved to the newcomer, where before they meant
    dh: compression's registry refuses such a name, the mask-protocol registry now does too."""
    with pytest.raises(ValueError, match="already registered"):
        secagg.register("Dh", object)
    with pytest.raises(ValueError, match="already registered"):
        secagg.register("other", object, aliases=("dhprotocol",))
    assert secagg.get("DH") is DHProtocol and "Dh" not in secagg.names() and "other" not in secagg.names()


def test_protocol_namespaces_say_whether_they_mask_and_over_which_graph():
    assert DHProtocol.masks and DHProtocol.name == "dh" and DHProtocol.full_graph
    assert SecAggPlusProtocol.masks and SecAggPlusProtocol.name == "secaggplus" and not SecAggPlusProtocol.full_graph
    for protocol in (SecAggProtocol, SecAggPlusProtocol):
        assert protocol.Client is secagg.Client and protocol.Server is secagg.Server
    assert not NoMasking.masks and NoMasking.Client is None and NoMasking.Server is None


@pytest.mark.parametrize("cls,says", [(object, "no `masks` flag"), (type("Half", (), {"masks": True, "Client": object}),
                                                                    "lacks a Client or Server class"),
                                      (type("Truthy", (), {"masks": 1}), "no `masks` flag")])
def test_a_class_that_is_not_a_protocol_is_refused_at_registration(cls, says):
    """Any object was taken, and failed later where the config or a round read its `masks`, `Client` or `Server`."""
    with pytest.raises(TypeError, match=says):
        secagg.register("notaprotocol", cls)
    assert "notaprotocol" not in secagg.names()
    secagg.register("dh", DHProtocol)  # the shipped ones pass
