"""Settings combined as users combine them: configurations drawn (seeded) across codecs, masking protocols, index
policies and summaries, dropouts, stragglers, aggregation, partitions, cohort sizes and the server's step. Each must
either run to its last round with rows that hold together, or be refused with a ConfigError that says why; any
other exception, or rows that contradict their configuration, is a defect of the combination."""
import json
import random

import numpy as np

import fl
from fl.errors import ConfigError

DRAWS = 40
ROUNDS = 2
CODECS = ("topk", "topk", "randk", "qsgd", "fp16", "int8", "ternary", "countsketch", "rotation", "none")


def draw(rng: random.Random) -> list[str]:
    pick = rng.choice
    clients = pick((10, 30))
    return [f"seed={rng.randrange(5)}", "backend=inline", "model=mlp_small", f"fl.rounds={ROUNDS}",
            f"fl.num_clients={clients}", f"fl.clients_per_round={pick((3, 5, clients))}", "fl.local_epochs=1",
            f"dataset.partition={pick(('iid', 'dirichlet', 'shards', 'labels'))}",
            f"compression={pick(CODECS)}",
            f"compression.ratio={pick((0.5, 0.1, 0.01))}", f"secagg={pick(('none', 'dh', 'dh', 'secaggplus'))}",
            f"compression.index_policy={pick(('fresh', 'fresh', 'sketch', 'randk', 'prev_topk'))}",
            f"compression.fresh_summary={pick(('marginals', 'blocks', 'sketch', 'exact', 'energy'))}",
            f"secagg.dropout={pick((0.0, 0.0, 0.1, 0.3))}", f"fl.aggregation={pick(('cohort', 'cohort', 'memory'))}",
            f"fl.stragglers={pick((0.0, 0.0, 0.3))}", f"fl.straggler_policy={pick(('keep', 'drop'))}",
            f"fl.server_momentum={pick((0.0, 0.5))}", f"fl.max_update_norm={pick(('null', 1.0))}",
            f"compression.server={pick(('true', 'true', 'false'))}",
            f"compression.client={pick(('true', 'true', 'false'))}",
            f"compression.per_layer={pick(('false', 'true'))}", f"secagg.quant_bits={pick((16, 8))}",
            f"compression.error_feedback={pick(('true', 'false'))}", f"fl.eval_every={pick((1, 2))}",
            f"fl.eval_overlap={pick(('true', 'false'))}", f"fl.server_lr={pick((1.0, 2.0))}"]


def contradictions(rows, overrides: list[str]) -> list[str]:
    """What in the rows disagrees with the configuration that made them."""
    cfg = dict(o.split("=", 1) for o in overrides)
    masked, out = cfg["secagg"] != "none", []
    if len(rows) != ROUNDS:
        out.append(f"{len(rows)} rows")
    if not (rows["bytes_up"] == rows["bytes_up_payload"] + rows["bytes_up_protocol"]).all():
        out.append("bytes_up is not payload + protocol")
    if not masked and (rows["bytes_up_protocol"] != 0).any():
        out.append("protocol bytes without masking")
    if rows["field_bits"].notna().any() != masked:
        out.append("field_bits does not say whether the run was masked")
    if np.isnan(rows["accuracy"].iloc[-1]):
        out.append("the last round was not evaluated")
    evaluated = rows[rows["accuracy"].notna()]
    if not evaluated["accuracy"].between(0, 1).all() or not evaluated["top_class_share"].between(0, 1).all():
        out.append("an accuracy or a class share outside [0, 1]")
    if (rows["rejected"] > int(cfg["fl.clients_per_round"])).any():
        out.append("more updates rejected than the cohort holds")
    # clients are lost only to dropouts, and to stragglers the server does not wait for
    lossless = float(cfg["secagg.dropout"]) == 0 and (float(cfg["fl.stragglers"]) == 0
                                                      or cfg["fl.straggler_policy"] == "keep")
    if lossless and (rows["dropped"] > 0).any():
        out.append("clients dropped with no dropout or dropped straggler configured")
    if lossless and rows["aborted"].astype(bool).any():
        out.append("a round aborted with every client there")
    return out


def test_drawn_combinations_run_with_consistent_rows_or_are_refused_with_a_reason(tmp_path):
    rng = random.Random(2026)
    ran, refused, defects = 0, 0, []
    for i in range(DRAWS):
        overrides = draw(rng) + [f"results.dir={tmp_path / str(i)}"]
        try:
            rows = fl.run(fl.compose(overrides))
        except ConfigError as err:
            refused += 1
            if not str(err).strip():
                defects.append((overrides, "refused without a reason"))
            continue
        except Exception as err:  # noqa: BLE001 - any other exception is what this test looks for
            defects.append((overrides, f"{type(err).__name__}: {err}"))
            continue
        ran += 1
        run_dir = next((tmp_path / str(i)).iterdir())
        assert json.loads((run_dir / "done.json").read_text())["run_id"] == rows["run_id"].iloc[0]
        defects += [(overrides, c) for c in contradictions(rows, overrides)]
    assert not defects, "\n".join(f"{' '.join(o)}: {what}" for o, what in defects)
    assert ran >= DRAWS // 2 and refused >= 3, (ran, refused)  # the draw reaches both outcomes, mostly runs
