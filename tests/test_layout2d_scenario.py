"""The ``transformer_step`` scenario's ``layout=`` (decode / prefill under a 2-D weight-stationary grid), as
``podsim model --layout`` takes it: the book's crossover computed here from the model's widths, the settings a
2-D layout cannot honour refused in one line."""
import math

import pytest

from scenarios import transformer_step
from simulator.errors import PodsimError

# Multi-head attention with as many heads as the largest mesh (so the 1-D layout exists there too), plain MLP
MHA = """name = "mha"\nd_model = 1024\nd_ff = 4096\nn_layers = 1\nn_heads = 256\nhead_dim = 4\nvocab_size = 1024
gated_mlp = false\n"""


@pytest.fixture(scope="module")
def mha(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "mha.toml"
    path.write_text(MHA)
    return str(path)


def step(config: str, chips: int, layout: str, **kw):
    side = math.isqrt(chips)
    return transformer_step.run(config=config, mode="prefill", batch=16, prompt=512, mesh=f"model={chips}",
                                layout=layout, chip="tpu-v5e", topology=f"torus:{side}x{side}", trace=False, **kw)


def test_2d_layout_wins_past_the_books_crossover_and_loses_before_it(mha):
    """Per token and layer 1-D AllReduces 4 D elements over both torus axes, 2-D moves 4D/X + F'/Y over one axis
    each (F' = 2q + 2kv + 2F): at the best grid 2-D wins once M > 4 F'/D = 48 chips here."""
    crossover = 4 * (2 * 1024 + 2 * 1024 + 2 * 4096) / 1024
    assert crossover == 48
    for chips in (16, 256):
        two, one = step(mha, chips, "2d"), step(mha, chips, "1d")
        t2, t1 = two.extra["step_time_s"], one.extra["step_time_s"]
        assert (t2 < t1) == (chips > crossover), (chips, t2, t1)
        assert two.params["layout"] == "2d"
        assert two.extra["budget"]["lower_bound_s"] <= t2
    assert two.extra["layout"] == "2d:16x16" and t1 / t2 > 1.5  # each grid axis a whole torus axis; about 2x


def test_a_named_grid_and_the_2d_refusals(mha):
    out = step(mha, 16, "2d:4x4", calibrated=True, price_per_chip_hour=3.6)
    assert (out.extra["x"], out.extra["y"]) == (4, 4)
    assert out.extra["calibrated_step_time_s"] >= out.extra["step_time_s"]  # fitted efficiencies are at most 1
    assert out.extra["cost_per_step_usd"] == pytest.approx(3.6 * 16 * out.extra["step_time_s"] / 3600)
    for kw, match in ((dict(layout="2d:3x5"), r"3 x 5 = 15 chips, not 16; the nearest valid choice is --layout 2d:"),
                      (dict(layout="3d"), "valid: 1d, 2d"),
                      (dict(layout="2d", kv_sharding="batch"), r"^kv_sharding=batch is for layout=1d; layout=2d "),
                      (dict(layout="2d", mode="train"), r"^layout=2d is for decode and prefill")):
        args = dict(config=mha, mode="prefill", batch=16, prompt=64, mesh="model=16", chip="tpu-v5e",
                    topology="torus:4x4", trace=False)
        args.update(kw)
        with pytest.raises(PodsimError, match=match) as err:
            transformer_step.run(**args)
        assert "\n" not in str(err.value)
