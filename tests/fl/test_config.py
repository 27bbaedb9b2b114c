"""Configuration is validated when composed: bad input is refused before any work and writes nothing."""
import pytest
from omegaconf import OmegaConf

import fl
import secagg
from fl.api import CONF_DIR
from fl.config import ConfigError, as_dict, validate
from fl.results import config_hash


def test_default_config_is_the_older_frameworks_reference_setting():
    cfg = validate(fl.compose())
    assert cfg.secagg.name == "dh" and cfg.compression.name == "topk"
    assert cfg.compression.ratio == 0.5 and cfg.compression.client and cfg.compression.server
    assert cfg.compression.error_feedback and cfg.compression.index_policy == "fresh"
    assert cfg.dataset.name == "digits" and cfg.model.name == "mlp_large" and cfg.backend == "ray"
    assert cfg.ray.address is None


def test_typo_in_a_key_is_refused_at_composition():
    with pytest.raises(Exception, match="roundz"):
        fl.compose(["fl.roundz=3"])
    with pytest.raises(Exception, match="roundz"):  # a forced addition composes, and is refused by the schema
        validate(fl.compose(["+fl.roundz=3"]))


def test_unknown_config_group_option_lists_the_available_ones():
    with pytest.raises(Exception) as err:
        fl.compose(["compression=zip"])
    assert "topk" in str(err.value) and "none" in str(err.value)


@pytest.mark.parametrize("key,value,names", [
    ("compression.name", "zip", ["topk", "none", "TopKProtocol"]),
    ("secagg.name", "rsa", ["dh", "none", "DHProtocol"]),
])
def test_unknown_protocol_name_lists_registered_names(key, value, names):
    cfg = fl.compose()
    OmegaConf.update(cfg, key, value)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    for name in names:
        assert name in str(err.value)


def test_seed_framework_aliases_resolve_to_canonical_names():
    cfg = validate(fl.build_config(mask_protocol="DHProtocol", compression_protocol="TopKProtocol"))
    assert (cfg.secagg.name, cfg.compression.name) == ("dh", "topk")
    with pytest.raises(ConfigError, match="registered"):
        fl.build_config(mask_protocol="RSAProtocol")


def test_the_api_switches_keep_a_codecs_preset_unless_set():
    """run_server(compression_protocol='qsgd') compressed the broadcast, which qsgd's preset turns off (it
    diverges), where `simulate.py compression=qsgd` does not: the two spellings ran different experiments."""
    api = validate(fl.build_config(mask_protocol=None, compression_protocol="qsgd"))
    cli = validate(fl.compose(["secagg=none", "compression=qsgd", "compression.ratio=0.5"]))
    assert api == cli and api.compression.server is False
    forced = validate(fl.build_config(mask_protocol=None, compression_protocol="qsgd", server_with_compression=True))
    assert forced.compression.server is True
    off = validate(fl.build_config(client_with_compression=False))
    assert (off.compression.client, off.compression.server) == (False, True)


def test_run_server_hands_its_switches_and_the_older_frameworks_defaults_to_the_run(monkeypatch):
    """run_server is build_config then fl.launch.run: each switch reaches the key of its own name, and a call
    without arguments runs the older framework's defaults (DH masking, top-k at ratio 0.5)."""
    import fl.launch

    ran = []
    monkeypatch.setattr(fl.launch, "run", ran.append)
    fl.run_server(server_with_compression=False, client_with_compression=True)
    assert (ran[0].compression.server, ran[0].compression.client) == (False, True)
    fl.run_server()
    assert ran[1] == fl.build_config()
    assert (ran[1].secagg.name, ran[1].compression.name, ran[1].compression.ratio) == ("dh", "topk", 0.5)


def test_a_codec_registered_without_a_yaml_runs_from_the_api(monkeypatch):
    """docs/adding_a_codec.md: the file and its register line are all it takes. The API chose codecs as a config
    group, which needs conf/compression/<name>.yaml, and refused the registered name."""
    from compression import registry
    from compression.none import NoCompression

    class Copy(NoCompression):
        name = "copycodec"

    monkeypatch.setattr(registry, "_classes", dict(registry._classes))
    monkeypatch.setattr(registry, "_canonical_of", dict(registry._canonical_of))
    registry.register("copycodec", Copy)
    cfg = validate(fl.build_config(mask_protocol=None, compression_protocol="copycodec", compress_ratio=0.1))
    assert cfg == validate(fl.compose(["secagg=none", "compression.name=copycodec", "compression.ratio=0.1"]))
    assert cfg.compression.name == "copycodec"


def test_the_api_sets_codec_options_as_the_command_lines_plus_does_and_the_codec_checks_them():
    """`compression.options` is an empty dict in struct mode: run_server(compression={'options': {'levels': 8}})
    was refused with "Key 'levels' is not in struct", so no codec option could be set from the Python API."""
    cli = validate(fl.compose(["secagg=none", "compression=qsgd", "+compression.options.levels=8"]))
    for spelled in ({"compression": {"options": {"levels": 8}}}, {"compression.options.levels": 8}):
        api = validate(fl.build_config(mask_protocol=None, compression_protocol="qsgd", **spelled))
        assert api == cli and api.compression.options == {"levels": 8}
    with pytest.raises(ConfigError, match="levelz"):  # an option the codec does not take is still refused
        validate(fl.build_config(mask_protocol=None, compression_protocol="qsgd",
                                 compression={"options": {"levelz": 8}}))
    with pytest.raises(ConfigError, match="optionz"):  # and a misspelt key outside the options
        fl.build_config(mask_protocol=None, compression_protocol="qsgd", compression={"optionz": {"levels": 8}})


@pytest.mark.parametrize("ratio", [0, -0.1, 1.5, float("nan"), float("inf")])
def test_ratio_outside_unit_interval_is_refused_and_writes_no_rows(ratio, tmp_path):
    with pytest.raises(ConfigError, match="ratio"):
        fl.run_server(compress_ratio=ratio, backend="inline", **{"results.dir": str(tmp_path)})
    assert list(tmp_path.iterdir()) == []


def test_a_protocol_of_none_is_off_and_a_section_may_be_a_dict_of_its_keys():
    cfg = validate(fl.build_config(mask_protocol=None, compression_protocol=None, rounds=3,
                                   results={"dir": "elsewhere"}, dataset={"partition": "shards"}))
    assert (cfg.secagg.name, cfg.compression.name) == ("none", "none")
    assert (cfg.results.dir, cfg.dataset.partition, cfg.fl.rounds) == ("elsewhere", "shards", 3)
    assert cfg.dataset.shards_per_client == 2  # the section's other keys keep their defaults
    with pytest.raises(ConfigError, match="dataset.not_a_key"):
        fl.build_config(dataset={"not_a_key": 1})


def test_a_path_starting_with_a_tilde_is_refused_not_made_a_folder_named_tilde(tmp_path, monkeypatch):
    """Hydra's grammar refuses an unquoted ~, but the Python API took results={'dir': '~/runs'} and wrote the rows
    to ./~/runs (and dataset.download=true would have downloaded into ./~/data)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"results.dir=~/runs is not expanded .* write the path out"):
        fl.run_server(rounds=1, backend="inline", model="mlp_small", results={"dir": "~/runs"})
    with pytest.raises(ConfigError, match=r"dataset.root=~/data is not expanded"):
        validate(fl.build_config(dataset="fashion_mnist", **{"dataset.root": "~/data", "dataset.download": True}))
    assert validate(fl.build_config(**{"dataset.root": "~/data"})).dataset.root == "data"  # digits reads no folder
    for path in ("~", "~alice/runs"):  # a bare ~ and ~user are not expanded either
        with pytest.raises(ConfigError, match=f"results.dir={path} is not expanded"):
            validate(fl.build_config(results={"dir": path}))
    assert list(tmp_path.iterdir()) == []


def test_run_server_refuses_unknown_keyword():
    with pytest.raises(ConfigError, match="not_a_key"):
        fl.build_config(not_a_key=3)


@pytest.mark.parametrize("kwargs,match", [
    ({"rounds": 5, "fl": {"rounds": 9}}, r"fl.rounds is given twice, as rounds=5 and as fl.rounds=9"),
    ({"compress_ratio": 0.1, "compression": {"ratio": 0.2}}, r"compression.ratio is given twice, as compress_ratio"),
    ({"compression": {"ratio": 0.2}}, r"compression.ratio is given twice, as compress_ratio=0.5"),
    ({"client_with_compression": False, "compression.client": True}, r"compression.client is given twice"),
    ({"seed": 1, "fl": {"lr": 0.1}, "fl.lr": 0.2}, r"fl.lr is given twice"),
])
def test_one_key_given_twice_by_two_spellings_is_refused(kwargs, match):
    """The later spelling won without a word (compress_ratio=0.1 with compression={'ratio': 0.2} ran at 0.2)."""
    with pytest.raises(ConfigError, match=match):
        fl.build_config(**kwargs)


@pytest.mark.parametrize("override,match", [
    ("fl.clients_per_round=11", "clients_per_round"),
    ("backend=spark", "backend"),
    ("dataset.partition=pathological", "partition"),
    ("dataset.partition=labels dataset.labels_per_client=11", "labels_per_client"),
    ("dataset.partition=labels dataset.labels_per_client=0", "labels_per_client"),
    ("dataset.partition=labels fl.num_clients=5 fl.clients_per_round=5", "at least 10 clients"),
    ("compression.index_policy=best", "index_policy"),
    ("secagg.clip=0", "clip"),
    # values that passed validation and failed later: in the workers, after the data loaded, or mid-run
    ("dataset.test_fraction=nan", r"test_fraction must be in \(0, 1\), got nan"),
    ("dataset.test_fraction=1.5", "test_fraction"),
    ("seed=-1", r"seed must be in \[0, 2\*\*32\)"),
    ("results.dir=", r"results.dir is empty: name a folder"),  # it wrote run folders into the working directory
    ("seed=4294967296", "seed"),
    ("fl.lr=inf", "fl.lr must be > 0 and finite"),
    ("fl.weight_decay=inf", "weight_decay"),
    ("secagg.max_weight=inf", "secagg.max_weight must be > 0 and finite, got inf"),
    ("secagg.max_weight=1e300", r"secagg.max_weight must be at most 32767 .* mean size would be under one step"),
    # every split has a client of at least the mean size: refused when the run started, after its sweep's checks
    ("secagg.max_weight=0.99", r"secagg.max_weight must be at least 1 .*got 0.99"),
    ("secagg.sketch_clip=inf", "sketch_clip"),
    # a subnormal clip's scale B / clip is inf: masked values quantized to garbage, read back as 0 (no update)
    ("secagg.clip=1e-320", r"secagg: clip 1e-320 is too small: its scale B / clip = 32767 / 1e-320 overflows"),
    ("secagg.sketch_clip=1e-320", "secagg.sketch_clip: clip 1e-320 is too small"),
    ("compression=rotation compression.options.clip=1e-320", "compression.options.clip: clip 1e-320 is too small"),
    ("compression.prev_topk_random=nan", r"prev_topk_random \(a share of k\) must be in \[0, 1\]"),
    ("compression.prev_topk_random=2", "prev_topk_random"),
    ("compression.sketch_cols_per_k=inf", "sketch_cols_per_k"),
    ("dataset.partition=dirichlet dataset.alpha=inf", "alpha must be > 0 and finite"),
    ("model.hidden=[-5]", r"widths must be >= 1, got \[-5\]"),
    ("model.hidden=[0]", "widths must be >= 1"),
    ("model=lenet model.channels=[0,16]", "widths must be >= 1"),
    ("model=lenet model.channels=[]", r"model 'lenet' needs model.channels"),
    # torch failed building these once the data had loaded (a 5x5 valid kernel on 2x2 maps), or they trained a
    # network whose last stage outputs only its bias (GroupNorm groups of one value at 1x1)
    ("model=lenet model.padding=valid", r"stage 2 gets 2x2 maps of digits, under its 5x5 kernel"),
    ("dataset=fashion_mnist model=lenet model.padding=valid model.channels=[6,16,32]", "stage 3 gets 4x4 maps"),
    ("model=resnet_small model.channels=[8,16,32,32]", r"stage 4 is 1x1 on digits and GroupNorm puts each of its 32"),
    ("ray.num_workers=-1", r"ray.num_workers must be >= 1 or null"),
    ("ray.num_workers=0", "ray.num_workers"),
    ("ray.num_cpus_per_worker=-1", "num_cpus_per_worker"),
    ("ray.num_gpus_per_worker=-1", "num_gpus_per_worker"),
    # Ray refused these once it had started and the data had loaded, naming its num_cpus, not the key
    ("ray.num_cpus_per_worker=0.00005", r"ray.num_cpus_per_worker=5e-05 is below 0.0001, the smallest share Ray"),
    ("ray.num_gpus_per_worker=1e-5", r"ray.num_gpus_per_worker=1e-05 is below 0.0001"),
    ("ray.call_timeout_s=0", r"ray.call_timeout_s must be a positive number of seconds or null "
                             r"\(wait for ever\), got 0"),
    ("ray.call_timeout_s=inf", "ray.call_timeout_s"),
    ("ray.call_timeout_s=nan", "ray.call_timeout_s"),
    ("secagg=none secagg.dropout=5", r"secagg.dropout must be in \[0, 1\), got 5"),  # was reset, unread, unchecked
    ("secagg=none secagg.dropout=-1", "secagg.dropout"),
    # the protocol calls them degree and threshold t; the refusal names the keys the user set
    ("secagg=secaggplus secagg.neighbours=1", r"secagg.neighbours=1, secagg.threshold=null with 10 clients a round: "
                                              r"degree must be an even integer in \[2, 9\]"),
    ("secagg=secaggplus secagg.neighbours=4 secagg.threshold=6",
     r"secagg.neighbours=4, secagg.threshold=6 .*exceeds the 5"),
])
def test_inconsistent_values_are_refused(override, match):
    with pytest.raises(ConfigError, match=match):
        validate(fl.compose(override.split()))


@pytest.mark.parametrize("group", ["model", "dataset"])
def test_the_older_api_refuses_an_unknown_model_or_dataset_with_a_config_error_listing_the_options(group):
    with pytest.raises(ConfigError, match=f"Could not find '{group}/bogus' Available options in '{group}': "):
        fl.build_config(**{group: "bogus"})


def test_fixed_point_overflow_is_checked_at_config_time():
    """With more clients than the field can sum without wrapping, the config is refused up front."""
    cfg = fl.compose(["fl.num_clients=100000000", "fl.clients_per_round=100000000"])
    with pytest.raises(ConfigError, match="secagg"):
        validate(cfg)


@pytest.mark.parametrize("n,quant,smallest", [(10, 16, 20), (2, 16, 17), (100, 16, 23), (10, 8, 12), (1000, 20, 30)])
def test_a_field_that_could_wrap_for_the_cohort_is_refused_naming_the_smallest_safe_width(n, quant, smallest):
    """secagg.bits below the smallest safe width for clients_per_round values of quant_bits is refused with that
    width named; the smallest safe width itself is accepted and is the default (null)."""
    base = [f"fl.num_clients={n}", f"fl.clients_per_round={n}", f"secagg.quant_bits={quant}"]
    for narrow in (smallest - 1, quant - 1):  # narrower than the sum, or than one value
        with pytest.raises(ConfigError, match=f"a {narrow}-bit field can wrap.*at least {smallest} bits"):
            validate(fl.compose([*base, f"secagg.bits={narrow}"]))
    assert validate(fl.compose([*base, f"secagg.bits={smallest}"])).secagg.bits is None  # one spelling: auto
    from fl.plan import Plan
    assert Plan.build(validate(fl.compose(base)), [100]).field_bits == smallest
    assert validate(fl.compose([*base, "secagg.bits=32"])).secagg.bits == 32


def test_quant_bits_whose_sum_needs_more_than_32_bits_are_refused():
    with pytest.raises(ConfigError, match="over 32; lower secagg.quant_bits"):
        validate(fl.compose(["fl.num_clients=1000", "fl.clients_per_round=1000", "secagg.quant_bits=24"]))
    with pytest.raises(ConfigError, match="quant_bits"):
        validate(fl.compose(["secagg.quant_bits=1"]))


def test_no_compression_under_masking_is_dense_masking_whatever_compression_client_says():
    """compression.client=true with compression=none was refused as 'none cannot be combined with masking'."""
    said = validate(fl.compose(["compression=none", "compression.client=true", "compression.per_layer=true"]))
    assert said == validate(fl.compose(["compression=none"]))


def test_a_split_whose_heaviest_client_masking_would_weigh_less_than_its_samples_is_refused(tmp_path):
    """A masked client's FedAvg weight (samples / mean samples) is capped at secagg.max_weight: past it the
    masked sum silently stopped being FedAvg's, unlike the same split unmasked."""
    split = [f"results.dir={tmp_path}", "backend=inline", "dataset.partition=dirichlet", "dataset.alpha=0.1",
             "fl.rounds=1", "model=mlp_small", "compression.ratio=0.1"]
    with pytest.raises(ConfigError, match=r"client \d+ holds \d+ samples, 2\.\d\d times the mean.*"
                                          r"secagg.max_weight=1.5; set secagg.max_weight >= 2\.\d"):
        fl.run(fl.compose([*split, "secagg.max_weight=1.5"]))
    assert not any(tmp_path.rglob("rounds*.csv"))  # refused before any round: nothing recorded
    assert len(fl.run(fl.compose([*split, "secagg=none", "secagg.max_weight=1.5"]))) == 1  # unmasked: exact weights
    assert len(fl.run(fl.compose([*split, "secagg.max_weight=3"]))) == 1


def test_masking_refuses_a_cohort_of_one_whose_sum_is_its_input():
    with pytest.raises(ConfigError, match="clients_per_round >= 2"):
        validate(fl.compose(["secagg=dh", "fl.num_clients=1", "fl.clients_per_round=1"]))
    assert validate(fl.compose(["secagg=none", "fl.num_clients=1", "fl.clients_per_round=1"])).fl.clients_per_round == 1


@pytest.mark.parametrize("key,bad,good", [
    ("compression.sketch_quant_bits", 32, 31),  # a signed value of 32 bits leaves no room in a 32-bit field
    ("secagg.max_weight", 32768, 32767),        # 2**WEIGHT_BITS - 1 is the largest weight the 15-bit slot holds
])
def test_a_bound_one_past_its_largest_value_is_refused(key, bad, good):
    two = ["fl.num_clients=2", "fl.clients_per_round=2"]  # the sum of two 31-bit values fits 32 bits
    with pytest.raises(ConfigError, match=key):
        validate(fl.compose(["secagg=dh", *two, f"{key}={bad}"]))
    validate(fl.compose(["secagg=dh", *two, f"{key}={good}"]))


@pytest.mark.parametrize("secagg", ["none", "dh"])
def test_a_dropout_of_one_is_refused(secagg):
    """Every client vanishing at every step would only ever abort (or skip) the rounds."""
    with pytest.raises(ConfigError, match=r"secagg.dropout must be in \[0, 1\), got 1"):
        validate(fl.compose([f"secagg={secagg}", "secagg.dropout=1"]))


def test_settings_that_cannot_act_have_one_spelling():
    """Top-k at ratio 1 is no compression, and a residual dtype without error feedback stores nothing: each is
    spelled as its default, so equal runs share a config hash (a sweep runs them once, the report finds the
    dense baseline)."""
    for protocol in ("none", "dh"):
        at_one = validate(fl.compose([f"secagg={protocol}", "compression.ratio=1.0"]))
        assert (at_one.compression.name, at_one.compression.ratio) == ("none", 1.0)
        assert at_one == validate(fl.compose([f"secagg={protocol}", "compression=none"]))
    no_feedback = validate(fl.compose(["secagg=none", "compression.error_feedback=false",
                                       "compression.residual_dtype=float16"]))
    assert no_feedback.compression.residual_dtype == "float32"
    assert no_feedback == validate(fl.compose(["secagg=none", "compression.error_feedback=false"]))


@pytest.mark.parametrize("setting", [
    ["compression=qsgd", "secagg=none"],                   # unbiased: no residual
    ["compression=rotation", "secagg=dh"],                  # a linear codec's table is masked whole
    ["compression=randk", "+compression.options.unbiased=true", "compression.server=false", "secagg=none"],
    ["compression=topk", "compression.client=false", "secagg=none"],  # the broadcast only: the server keeps it
])
def test_error_feedback_where_no_client_keeps_a_residual_has_one_spelling(setting):
    """qsgd with error feedback on and off ran twice under two hashes, bit for bit the same, and the report
    showed two lines whose EF column said `off` beside `compression.error_feedback=true`."""
    on = validate(fl.compose(setting + ["compression.error_feedback=true", "compression.residual_dtype=float16"]))
    off = validate(fl.compose(setting + ["compression.error_feedback=false"]))
    assert on == off and on.compression.error_feedback is True  # the default, as committed runs spell it
    assert config_hash(as_dict(on)) == config_hash(as_dict(off))


@pytest.mark.parametrize("setting", [["compression=topk", "secagg=none"], ["compression=topk", "secagg=dh"],
                                     ["compression=none", "secagg=none"]])
def test_error_feedback_under_memory_aggregation_has_one_spelling(setting):
    """fl.aggregation=memory: each client keeps a memory instead of a residual, so the switch cannot act; without
    compression it reads as a dense cohort run spells it."""
    on, off = (validate(fl.compose(setting + ["fl.aggregation=memory", f"compression.error_feedback={v}"]))
               for v in ("true", "false"))
    assert on == off and config_hash(as_dict(on)) == config_hash(as_dict(off))
    cohort = validate(fl.compose(setting))
    assert on.compression.error_feedback == cohort.compression.error_feedback


@pytest.mark.parametrize("setting", [["compression=topk", "secagg=none"], ["compression=topk", "secagg=dh"],
                                     ["compression=int8", "secagg=none"]])
def test_error_feedback_where_clients_keep_residuals_is_a_setting(setting):
    on, off = (validate(fl.compose(setting + [f"compression.error_feedback={v}"])) for v in ("true", "false"))
    assert config_hash(as_dict(on)) != config_hash(as_dict(off))


@pytest.mark.parametrize("model,unread", [
    ("mlp_small", ["model.norm=batch", "model.padding=valid", "model.channels=[4]"]),
    ("lenet", ["model.norm=batch"]),
    ("resnet_small", ["model.padding=valid"]),
])
def test_a_model_key_its_model_does_not_read_has_one_spelling(model, unread):
    """model.norm acts in resnet_small only, model.padding in lenet and cnn_wide only, model.channels in no MLP:
    `-m model=mlp_small,resnet_small model.norm=group,batch` ran mlp_small twice under two hashes, bit for bit
    the same run, reported as two settings."""
    base = [f"model={model}", "secagg=none"]
    for extra in unread:
        assert config_hash(as_dict(validate(fl.compose(base + [extra])))) == \
            config_hash(as_dict(validate(fl.compose(base)))), extra


@pytest.mark.parametrize("setting", [["model=resnet_small", "model.norm=batch"],
                                     ["model=lenet", "model.channels=[6]", "model.padding=valid"]])
def test_a_model_key_its_model_reads_is_a_setting(setting):
    base = setting[:-1]
    assert config_hash(as_dict(validate(fl.compose(["secagg=none", *setting])))) != \
        config_hash(as_dict(validate(fl.compose(["secagg=none", *base]))))


def test_per_layer_selection_of_masked_uploads_acts_only_on_a_compressed_broadcast():
    """Masked values go at the shared index set: per_layer changed nothing there but the config hash."""
    def spelled(*extra):
        return [config_hash(as_dict(validate(fl.compose(["secagg=dh", "compression.ratio=0.1", *extra,
                                                         f"compression.per_layer={v}"])))) for v in ("true", "false")]
    upload_only = spelled("compression.server=false")
    assert upload_only[0] == upload_only[1]
    both = spelled()  # the broadcast's top-k selects per layer
    assert both[0] != both[1]
    plain = [config_hash(as_dict(validate(fl.compose(["secagg=none", "compression.ratio=0.1",
                                                      "compression.server=false",
                                                      f"compression.per_layer={v}"])))) for v in ("true", "false")]
    assert plain[0] != plain[1]


def test_a_linear_codec_without_the_table_methods_is_refused_before_it_runs(monkeypatch):
    """A codec that only set `linear = True` passed the config checks and crashed in the workers with a bare
    AttributeError, leaving a failed run."""
    from compression import registry
    from compression.none import NoCompression

    class HalfLinear(NoCompression):
        name, linear = "halflinear", True

    monkeypatch.setattr(registry, "_classes", dict(registry._classes))
    monkeypatch.setattr(registry, "_canonical_of", dict(registry._canonical_of))
    registry.register("halflinear", HalfLinear)
    with pytest.raises(ConfigError, match="'halflinear' is linear .* no table_size, masked_table, from_table"):
        validate(fl.compose(["secagg=dh", "compression.name=halflinear"]))
    validate(fl.compose(["secagg=none", "compression.name=halflinear"]))  # plain: it is sent as any codec is
    for name in ("rotation", "countsketch"):  # a count sketch goes back through the server's error feedback
        validate(fl.compose(["secagg=dh", f"compression={name}", "compression.ratio=0.1"]))


def test_a_summary_width_whose_field_would_pass_32_bits_is_refused_before_any_work(tmp_path):
    """compression.sketch_quant_bits=31 passed the config checks (it is in [2, 31]); the `fresh` summary's field for
    10 clients is 35 bits, and round 0 raised a bare ValueError, leaving a failed run behind."""
    with pytest.raises(ConfigError, match="10 clients of 31-bit values .compression.sketch_quant_bits. need a 35-bit "
                                          "field, over 32; lower compression.sketch_quant_bits"):
        fl.run(fl.compose(["compression.sketch_quant_bits=31", "backend=inline", f"results.dir={tmp_path}"]))
    assert list(tmp_path.iterdir()) == []
    validate(fl.compose(["compression.sketch_quant_bits=28"]))  # 32 bits: the widest field
    validate(fl.compose(["compression.sketch_quant_bits=31", "compression.index_policy=randk"]))  # no summary


def test_where_digits_would_be_found_has_one_spelling():
    """digits is scikit-learn's bundled file: dataset.root and dataset.download read nothing for it."""
    plain = validate(fl.compose(["secagg=none"]))
    spelled = validate(fl.compose(["secagg=none", "dataset.root=/elsewhere", "dataset.download=true"]))
    assert config_hash(as_dict(spelled)) == config_hash(as_dict(plain))


@pytest.mark.parametrize("protocol,n,spelled", [("dh", 8, ["secagg.threshold=5"]), ("dh", 10, ["secagg.threshold=6"]),
                                                 ("secaggplus", 8, ["secagg.neighbours=6", "secagg.threshold=4"]),
                                                 ("secaggplus", 20, ["secagg.neighbours=10"])])
def test_the_default_threshold_and_degree_spelled_out_have_one_spelling(protocol, n, spelled):
    """secagg.bits at its automatic width is one spelling already; a strict-majority threshold (or SecAgg+'s
    default degree) written out ran the same rounds under another config hash."""
    base = [f"secagg={protocol}", f"fl.num_clients={n}", f"fl.clients_per_round={n}", "compression.ratio=0.1"]
    assert config_hash(as_dict(validate(fl.compose([*base, *spelled])))) == \
        config_hash(as_dict(validate(fl.compose(base))))
    higher = secagg.make_round(protocol, bytes(32), range(n), 1).threshold + 1
    other = validate(fl.compose([*base, f"secagg.threshold={higher}"]))  # another threshold is a setting
    assert other.secagg.threshold == higher


def test_the_default_threshold_of_a_degree_set_by_hand_spelled_out_has_one_spelling():
    """The strict majority is that of the degree the config names: at 20 clients and degree 6 (not the default 10),
    threshold 4 is the default, and another is a setting."""
    base = ["secagg=secaggplus", "fl.num_clients=20", "fl.clients_per_round=20", "compression.ratio=0.1",
            "secagg.neighbours=6"]
    spelled = validate(fl.compose([*base, "secagg.threshold=4"]))
    assert spelled.secagg.threshold is None
    assert config_hash(as_dict(spelled)) == config_hash(as_dict(validate(fl.compose(base))))
    assert validate(fl.compose([*base, "secagg.threshold=5"])).secagg.threshold == 5


def test_a_max_weight_of_one_is_accepted():
    """Every split has a client of at least the mean size (weight 1), so 1 is the smallest max_weight that holds
    one: a split of equal clients, each weighing exactly 1."""
    assert validate(fl.compose(["secagg=dh", "secagg.max_weight=1"])).secagg.max_weight == 1


def test_a_codec_seed_of_null_is_refused_for_a_run():
    """None is the codecs' own 'fresh OS entropy': two runs under one config hash gave different accuracy, and
    the second was then skipped as finished."""
    with pytest.raises(ConfigError, match="options.seed=null.*would not repeat"):
        validate(fl.compose(["secagg=none", "compression=qsgd", "+compression.options.seed=null"]))
    assert validate(fl.compose(["secagg=none", "compression=qsgd", "+compression.options.seed=3"]))


def test_unbiased_randk_is_refused_under_masking():
    """Masked values travel unscaled at the shared index set; the codec's unbiased flag only turned error feedback
    off, so the run was biased rand-k without feedback under the unbiased name."""
    masked = ["secagg=dh", "compression=randk", "compression.ratio=0.1", "+compression.options.unbiased=true"]
    with pytest.raises(ConfigError, match="unbiased values cannot be masked"):
        validate(fl.compose(masked))
    assert validate(fl.compose(["secagg=none", "compression.server=false", *masked[1:]]))  # unmasked: scaled by n/k
    assert validate(fl.compose([*masked[:3], "+compression.options.unbiased=false"]))


def test_unbiased_randk_on_the_broadcast_is_refused_where_it_diverges():
    """The broadcast is the codec of (global - what clients hold); rand-k scaled by n/k multiplied the part not yet
    sent by 1 - n/k, so the clients' model drifted from the global one by (1 - ratio) / ratio more (in mean square)
    each round, and the run collapsed without a word."""
    unbiased = ["secagg=none", "compression=randk", "+compression.options.unbiased=true"]
    for ratio in ("0.1", "0.5"):
        for client in ("true", "false"):
            with pytest.raises(ConfigError,
                               match="unbiased values on the broadcast.*diverges.*compression.server=false"):
                validate(fl.compose([*unbiased, f"compression.ratio={ratio}", f"compression.client={client}"]))
    assert validate(fl.compose([*unbiased, "compression.ratio=0.1", "compression.server=false"]))
    assert validate(fl.compose([*unbiased, "compression.ratio=0.7"]))  # the part left shrinks
    assert validate(fl.compose(["secagg=none", "compression=randk", "compression.ratio=0.1"]))  # biased: no scaling


def test_an_evaluation_period_past_the_last_round_has_one_spelling():
    """Rounds 0 and rounds - 1 are always evaluated, so every fl.eval_every >= rounds - 1 evaluates the same rounds:
    20 and 50 ran bit for bit the same 20-round run under two hashes."""
    def spelled(every, rounds=20):
        return config_hash(as_dict(validate(fl.compose(["secagg=none", f"fl.rounds={rounds}",
                                                        f"fl.eval_every={every}"]))))
    assert spelled(19) == spelled(20) == spelled(50) != spelled(18)
    assert spelled(1, rounds=2) == spelled(5, rounds=2) and spelled(1, rounds=1) == spelled(3, rounds=1)


@pytest.mark.parametrize("codec,option,secagg", [("rotation", "clip", "dh"), ("countsketch", "cols_per_k", "none")])
def test_a_float_codec_option_written_as_an_integer_has_one_spelling(codec, option, secagg):
    """compression.options is untyped: clip=1 and clip=1.0 ran the same run under two config hashes."""
    def spelled(value):
        return config_hash(as_dict(validate(fl.compose([f"secagg={secagg}", f"compression={codec}",
                                                        f"++compression.options.{option}={value}"]))))
    assert spelled(1) == spelled("1.0") != spelled(2)


@pytest.mark.parametrize("default,spelled_out,other", [
    (["compression.name=rotation"], ["compression=rotation"], ["compression=rotation", "compression.options.bits=4"]),
    (["secagg=none", "compression=qsgd"], ["secagg=none", "compression=qsgd", "+compression.options.levels=16"],
     ["secagg=none", "compression=qsgd", "+compression.options.levels=8"]),
    (["compression=countsketch"], ["compression=countsketch", "+compression.options.rows=5"],
     ["compression=countsketch", "+compression.options.rows=3"]),
])
def test_a_codec_option_at_the_codecs_default_has_one_spelling(default, spelled_out, other):
    """The rotation preset writes out the codec's defaults (bits 8, clip 0.02): compression.name=rotation and
    compression=rotation ran the same run under two config hashes."""
    def chash(overrides):
        return config_hash(as_dict(validate(fl.compose(overrides))))
    assert chash(default) == chash(spelled_out) != chash(other)
    seeded = ["secagg=none", "compression=qsgd"]  # a seed left out is the run's: written out, it is fixed
    assert chash([*seeded, "+compression.options.seed=0"]) != chash(seeded)


def test_a_layout_among_the_codec_options_is_refused_before_any_work(tmp_path):
    """The codec took it, so validation passed, and the run failed at its first upload ("layout sums to 5 but the
    vector has length 4810"), leaving a failed run's folder."""
    with pytest.raises(ConfigError, match="compression.options.layout .* compression.per_layer=true"):
        fl.run(fl.compose(["secagg=none", "model=mlp_small", "fl.rounds=1", "backend=inline",
                           f"results.dir={tmp_path}", "+compression.options.layout=[5]"]))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("given,key", [({"fl": {"rounds": 2.5}}, "fl.rounds"), ({"seed": True}, "seed"),
                                       ({"compression": {"ratio": None}}, "compression.ratio"),
                                       ({"fl": {"roundz": 3}}, "fl.roundz")])
def test_a_wrong_type_in_a_config_given_as_a_dict_is_refused_naming_the_key(given, key):
    """fl.run(cfg) of a hand-built or loaded config (experiments.reproduce reads config.json) said only "Value
    '2.5' of type 'float' could not be converted to Integer": OmegaConf names the key on a line that was dropped."""
    with pytest.raises(ConfigError, match=f"^{key}: "):
        validate(OmegaConf.create(given))


@pytest.mark.parametrize("group,switch,name", [("secagg", "mask_protocol", "secaggplus"),
                                               ("compression", "compression_protocol", "qsgd")])
def test_the_api_points_a_protocol_group_chosen_by_name_to_its_switch(group, switch, name):
    """model='mlp_small' chooses a config group; secagg='secaggplus' was refused with "Invalid type assigned: str is
    not a subclass of SecAggConfig"."""
    with pytest.raises(ConfigError, match=f"{group}='{name}': choose it with {switch}='{name}'"):
        fl.build_config(**{group: name})
    # nor by its name key: that took the name over the switch's, keeping the switch's preset (qsgd's broadcast off
    # under compression={'name': 'topk'})
    for given in ({group: {"name": "none"}}, {f"{group}.name": "none"}):
        with pytest.raises(ConfigError, match=f"{group}.name='none': choose it with {switch}='none'"):
            fl.build_config(**{switch: name}, **given)


@pytest.mark.parametrize("key,name", [("model", "mlp_small"), ("dataset", "mnist")])
def test_a_model_or_dataset_chosen_by_its_name_key_is_refused_naming_the_group(key, name):
    """model.name=mlp_small ran mlp_large's widths under mlp_small's name; dataset.name=mnist kept digits' (no)
    system folders."""
    with pytest.raises(ConfigError, match=f"^{key}.name={name}: choose it with {key}={name} "):
        fl.compose([f"{key}.name={name}"])
    for given in ({key: {"name": name}}, {f"{key}.name": name}):
        with pytest.raises(ConfigError, match=f"^{key}.name='{name}': choose it with {key}='{name}' "):
            fl.build_config(**given)
    assert fl.build_config(**{key: name})[key].name == name


@pytest.mark.parametrize("preset", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_a_group_chosen_on_the_command_line_wins_over_the_presets_choice(preset):
    """`+experiment=topk_digits secagg=dh` ran unmasked: the preset set `secagg.name: none` over the group the
    command chose, so `-m +experiment=topk_digits secagg=none,dh` ran one cell where it named two."""
    for group, name in [("secagg", "secaggplus"), ("model", "cnn_wide"), ("compression", "randk"),
                        ("dataset", "cifar10")]:
        assert fl.compose([f"+experiment={preset}", f"{group}={name}"])[group].name == name, group


def test_the_api_takes_numpy_numbers_as_the_python_numbers_they_hold():
    """A sweep built with np.linspace passed np.float64(0.1), refused as "could not be converted to Float"."""
    import numpy as np

    cfg = fl.build_config(compress_ratio=np.float64(0.1), rounds=np.int64(2), results={"dir": "out"})
    assert cfg.compression.ratio == 0.1 and cfg.fl.rounds == 2 and type(cfg.fl.rounds) is int


def test_a_results_dir_that_is_a_file_is_refused_before_any_work(tmp_path):
    """It ended in NotADirectoryError when the run made its folder; so did a folder to be made in a file."""
    (tmp_path / "runs").write_text("")
    with pytest.raises(ConfigError, match=r"results.dir=.*runs: .*runs is a file: name a folder"):
        validate(fl.compose([f"results.dir={tmp_path / 'runs'}"]))
    with pytest.raises(ConfigError, match=f"results.dir=.*deeper: {tmp_path / 'runs'} is a file: name a folder"):
        validate(fl.compose([f"results.dir={tmp_path / 'runs' / 'a' / 'deeper'}"]))
    validate(fl.compose([f"results.dir={tmp_path / 'new' / 'a'}"]))  # folders still to be made are fine


SWITCHES = ["fl.eval_overlap", "dataset.download", "compression.client", "compression.server",
            "compression.error_feedback", "compression.per_layer", "results.save_model"]


def test_the_switches_checked_are_every_bool_of_the_schema_in_any_section():
    """A bool added to a section the check did not list (secagg, ray, results, or the top level) is checked too."""
    import dataclasses

    from fl.config import SWITCHES as CHECKED
    from fl.config import _switches

    assert CHECKED == set(SWITCHES)
    inner = dataclasses.make_dataclass("Inner", [("on", "bool", dataclasses.field(default=True)),
                                                 ("n", "int", dataclasses.field(default=1))])
    outer = dataclasses.make_dataclass("Outer", [("flag", "bool", dataclasses.field(default=False)),
                                                 ("inner", "Inner", dataclasses.field(default_factory=inner))])
    assert _switches(outer) == {"flag", "inner.on"}


@pytest.mark.parametrize("key", SWITCHES)
@pytest.mark.parametrize("value", ["2", "-1", "'2'"])
def test_a_number_other_than_0_or_1_given_to_a_switch_is_refused_naming_it(key, value):
    """OmegaConf reads any integer as a bool: compression.client=2 ran with client compression on."""
    with pytest.raises(ConfigError, match=f"^{key} is a switch: true or false, got "):
        validate(fl.compose([f"{key}={value}"]))


@pytest.mark.parametrize("given", [{"client_with_compression": 2}, {"server_with_compression": -1},
                                   {"eval_overlap": 5}, {"compression": {"error_feedback": "3"}}])
def test_the_api_refuses_a_number_other_than_0_or_1_given_to_a_switch(given):
    with pytest.raises(ConfigError, match=r" is a switch: true or false, got '?-?\d"):
        fl.build_config(**given)


def test_a_switch_given_inf_is_refused_as_a_config_error():
    with pytest.raises(ConfigError, match="compression.client=inf: .* not a valid bool"):
        fl.build_config(client_with_compression=float("inf"))


def test_a_config_given_as_a_dict_refuses_a_number_other_than_0_or_1_given_to_a_switch():
    with pytest.raises(ConfigError, match="^compression.client is a switch: true or false, got 2$"):
        validate(OmegaConf.create({"compression": {"client": 2}}))


def test_a_config_given_as_the_dataclass_refuses_a_number_other_than_0_or_1_given_to_a_switch():
    """validate takes a Config too, whose fields Python does not type-check: client=2 ran with client compression."""
    from fl.config import CompressionConfig, Config

    with pytest.raises(ConfigError, match="^compression.client is a switch: true or false, got 2$"):
        validate(Config(compression=CompressionConfig(client=2)))
    assert validate(Config(compression=CompressionConfig(client=0))).compression.client is False


def test_a_config_given_as_the_dataclass_names_a_wrong_field_with_its_section():
    """It said 'clip: ...', which could be secagg.clip or compression.options.clip."""
    from fl.config import Config, FLConfig, SecAggConfig

    with pytest.raises(ConfigError, match="^secagg.clip: Value 'x' of type 'str' could not be converted to Float"):
        validate(Config(secagg=SecAggConfig(clip="x")))
    with pytest.raises(ConfigError, match="^fl.rounds: Value '2.5'"):
        validate(Config(fl=FLConfig(rounds=2.5)))


@pytest.mark.parametrize("name,text,bad", [
    ("experiment/mine.yaml", "# @package _global_\ncompression:\n  client: 2\n", "compression.client"),
    ("compression/mine.yaml", "name: topk\nserver: 3\n", "compression.server"),  # the group's own package
    ("dataset/mine.yaml", "# @package _group_\nname: digits\ndownload: -1\n", "dataset.download"),
    ("config.yaml", "fl:\n  eval_overlap: 2\n", "fl.eval_overlap"),
])
def test_a_number_other_than_0_or_1_given_to_a_switch_in_a_composed_yaml_file_is_refused_naming_it(
        tmp_path, name, text, bad):
    """The schema reads `client: 2` in a preset as true, as it does on the command line (which was checked)."""
    from fl.config import check_preset_switches

    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text)
    group, _, option = name.removesuffix(".yaml").rpartition("/")
    choices = {group: option} if group else {}
    with pytest.raises(ConfigError, match=f"{tmp_path / name}: {bad} is a switch: true or false, got (2|3|-1)$"):
        check_preset_switches(choices, ["/nowhere", str(tmp_path)])
    (tmp_path / name).write_text(text.replace(" 2\n", " true\n").replace(" 3\n", " 0\n").replace(" -1\n", " no\n"))
    check_preset_switches(choices, [str(tmp_path)])


def test_a_preset_with_a_switch_of_2_is_refused_where_it_is_composed(tmp_path):
    """Through fl.compose (and so python simulate.py), a preset found on a search path of the user's own."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\ncompression:\n  error_feedback: 2\n")
    with pytest.raises(ConfigError, match="mine.yaml: compression.error_feedback is a switch: true or false, got 2"):
        fl.compose([f"hydra.searchpath=[file://{tmp_path}]", "+experiment=mine"])
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\ncompression:\n  error_feedback: "
                                                      "${compression.client}\n")  # interpolations: the schema's
    assert fl.compose([f"hydra.searchpath=[file://{tmp_path}]", "+experiment=mine"]).compression.error_feedback


@pytest.mark.parametrize("line,env,refused", [
    ("error_feedback: ${oc.env:EF_SWITCH}", "2", "'2'"), ("error_feedback: ${fl.eval_every}", None, "2"),
    ("error_feedback: ${oc.env:EF_SWITCH}", "0", None), ("error_feedback: ${compression.client}", None, None),
    ("error_feedback: ${oc.env:EF_SWITCH}", "no", None)])
def test_a_switch_set_by_an_interpolation_is_checked_at_the_value_it_names(tmp_path, monkeypatch, line, env, refused):
    """The typed config reads an interpolation naming 2 as true: validate refuses it as it refuses a literal 2."""
    if env is not None:
        monkeypatch.setenv("EF_SWITCH", env)
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text(
        f"# @package _global_\nfl:\n  eval_every: 2\ncompression:\n  {line}\n")
    cfg = fl.compose([f"hydra.searchpath=[file://{tmp_path}]", "+experiment=mine", "secagg=none"])
    if refused is None:
        assert validate(cfg).compression.error_feedback is (env != "no" and env != "0")
    else:
        with pytest.raises(ConfigError, match=f"compression.error_feedback is a switch: true or false, got {refused}$"):
            validate(cfg)


@pytest.mark.parametrize("value,means", [("true", True), ("0", False), ("1", True), ("no", False), ("on", True)])
def test_a_switch_takes_true_false_0_1_and_omegaconfs_words(value, means):
    assert validate(fl.compose(["secagg=none", f"compression.client={value}"])).compression.client is means
    assert fl.build_config(mask_protocol=None, client_with_compression=value).compression.client is means


def test_a_codec_defined_in_main_is_refused_under_ray_whose_workers_would_not_know_it(monkeypatch):
    """A codec defined in a notebook: Ray ships its class by value, its register() never runs in a worker, and
    the run failed after Ray and the workers had started (a pickling dump, or 'unknown codec' in a worker)."""
    import compression
    from compression import registry

    monkeypatch.setattr(registry, "_classes", dict(registry._classes))  # the name goes with the test
    monkeypatch.setattr(registry, "_canonical_of", dict(registry._canonical_of))
    compression.register("mine_main", type("Mine", (compression.NoCompression,),
                                           {"__module__": "__main__", "name": "mine_main"}))
    overrides = ["compression.name=mine_main", "secagg=none"]
    with pytest.raises(ConfigError, match=r"codec 'mine_main' is defined in __main__ .* or run with backend=inline"):
        validate(fl.compose([*overrides, "backend=ray"]))
    assert validate(fl.compose([*overrides, "backend=inline"])).compression.name == "mine_main"


@pytest.mark.parametrize("address", ["AUTO", "Auto", "headnode", "ray:/head:10001", "head:port", "head 6379", "local",
                                     "head:", "ray://"])
def test_a_ray_address_ray_cannot_read_is_refused_naming_the_key(address):
    """`ray.address=AUTO` failed at Ray's start, after the data had loaded, with a traceback naming neither the key
    nor the spellings Ray reads. `local` (Ray's own spelling of a new local Ray) started one without this project's
    settings (cores, worker import path) that null gives it."""
    with pytest.raises(ConfigError, match=r"ray.address must be null .*auto .*host:port"):
        validate(fl.compose([f"ray.address='{address}'"]))


@pytest.mark.parametrize("address", ["auto", "127.0.0.1:6379", "head-node.example:6379", "ray://head:10001",
                                     "[::1]:6379", "anyscale://my-cluster", ""])
def test_the_ray_addresses_ray_reads_are_taken(address):
    assert validate(fl.compose([f"ray.address='{address}'"])).ray.address == address  # quoted: [ ] is a list
