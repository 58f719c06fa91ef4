"""``hookkit.sites``: one Site type reads and writes a value in a layer call (an output's tensor, an
input by position, keyword or first tensor, attention heads as a part with its own layout) and
attaches through the router; every feature goes through it. Checked against hand computations on
both frameworks, plus a site kind added from outside through ``KINDS``."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import hookkit
from hookkit.backends import backend_for
from hookkit.core.entry import entered
from hookkit.core.router import INTERVENTION, OBSERVER, attached
from hookkit.interventions.output_edits import edit_sites, sites_of
from hookkit.sites import FIRST, KINDS, WHOLE, Part, Site, attach_sites, resolve
from tolerance import assert_close


def _two_out(fw):
    """``two`` returns (x + 1, x * 2) (or x * scale): two tensors in its output; ``lin`` takes their sum."""

    class Two(fw.Layer):
        def forward(self, x, scale=None):
            return x + 1, x * 2 if scale is None else x * scale

    class Net(fw.Layer):
        def __init__(self):
            super().__init__()
            self.two = Two()
            self.lin = fw.linear(3, 3)

        def forward(self, x):
            a, b = self.two(x)
            return self.lin(a + b)

    return Net()


def test_reading_each_tensor_of_an_output_and_the_input(fw):
    model = _two_out(fw)
    be = backend_for(model)
    x = fw.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    found = resolve(model, "two", index=None) + resolve(model, "two", index=1) + resolve(model, "lin", input=True)
    seen: dict = {}

    def consumer(site):
        def read(ev):
            seen.setdefault((site.name, site.event, site.index), site.read(be, ev))  # returns None: no change

        return read

    group = attach_sites(model, found, consumer, OBSERVER)
    with fw.no_grad():
        model(x)
    group.remove()
    xs = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(fw.numpy(seen[("two", "forward", None)]), xs + 1)  # index None reads the first
    np.testing.assert_array_equal(fw.numpy(seen[("two", "forward", 1)]), xs * 2)
    np.testing.assert_array_equal(fw.numpy(seen[("lin", "forward_pre", FIRST)]), (xs + 1) + xs * 2)
    assert attached(model.two) == {e: 0 for e in attached(model.two)}  # all removed


def test_writing_an_output_tensor_and_an_input_keyword(fw):
    model = _two_out(fw)
    be = backend_for(model)
    x = fw.tensor(np.ones((1, 3), dtype=np.float32))
    with fw.no_grad():
        base = fw.numpy(model(x))
    out_site = Site("two", "two", model.two, "forward", 1)  # the second tensor: x * 2 -> 0
    group = attach_sites(model, [out_site], lambda s: lambda ev: s.write(be, ev, lambda t, i, ev: t * 0), INTERVENTION)
    with fw.no_grad():
        zeroed = fw.numpy(model(x))
    group.remove()
    w, b = fw.numpy(model.lin.weight), fw.numpy(model.lin.bias)
    lin = (lambda h: h @ w.T + b) if fw.name == "torch" else (lambda h: h @ w + b)
    # the layer's 3-term dot and bias against numpy's, on a constant input c: terms of size c |w| and |b|
    w_in_out = np.abs(w.T if fw.name == "torch" else w)
    terms = lambda c: float((c * w_in_out.sum(0) + np.abs(b)).max())  # noqa: E731
    assert_close(zeroed, lin(np.full((1, 3), 2.0, dtype=np.float32)), dtype="float32", n_ops=4, scale=terms(2.0))
    assert_close(base, lin(np.full((1, 3), 4.0, dtype=np.float32)), dtype="float32", n_ops=4, scale=terms(4.0))

    # an input by keyword: a site on ``two``'s ``scale`` keyword, given by the caller
    seen = []
    key_site = Site("two", "two", model.two, "forward_pre", "scale")
    group = attach_sites(model, [key_site], lambda s: lambda ev: s.write(be, ev, lambda t, i, ev: seen.append(t) or t * 3), INTERVENTION)
    with fw.no_grad():
        a, b = model.two(x, scale=fw.tensor(np.full((1, 3), 2.0, dtype=np.float32)))
        model(x)  # no scale given: the site has no tensor, nothing is written
    group.remove()
    np.testing.assert_array_equal(fw.numpy(b), np.full((1, 3), 6.0))  # x * (2 * 3)
    assert len(seen) == 1


def test_a_site_kind_added_in_one_place(fw):
    """A new kind (here: an output read through a part that scales it) plugs in through KINDS alone,
    and the edits take it by its option."""

    class Half(Part):
        __slots__ = ()
        kind = "halves"

        def get(self, be, t):
            return t * 0.5, None

        def put(self, be, t, state, new, where):
            return new * 2.0

    def halves(model, layers, options):
        return [Site(n, n, m, "forward", 0, Half()) for n, m in hookkit.select(model, layers)]

    KINDS["halves"] = halves
    try:
        model = fw.mlp((4, 3, 2))
        x = fw.randn(2, 4)
        with hookkit.capture(model, "0") as plain, fw.no_grad():
            model(x)
        found = resolve(model, "0", halves=True)
        assert [s.kind for s in found] == ["halves"]
        be = backend_for(model)
        seen = []
        group = attach_sites(model, found, lambda s: lambda ev: seen.append(s.read(be, ev)) and None, OBSERVER)
        with fw.no_grad():
            model(x)
        group.remove()
        np.testing.assert_allclose(fw.numpy(seen[0]), fw.numpy(plain["0"]) * 0.5, rtol=1e-6)
        # edit_sites writes through it: the record is halved, edited, put back doubled
        with entered("edit"):
            edits = edit_sites(model, resolve(model, "0", halves=True), lambda rec, i, ev, site: rec + 1.0)
        with edits, hookkit.capture(model, "0") as edited, fw.no_grad():
            model(x)
        # bit for bit: (t * 0.5 + 1) * 2 rounds once, as t + 2 does (halving and doubling are exact)
        np.testing.assert_array_equal(fw.numpy(edited["0"]), fw.numpy(plain["0"]) + 2.0)
        # the edits refuse positions= with any kind but outputs, naming the option
        with entered("steer"), pytest.raises(ValueError, match=r"steer\(\): halves must be None with positions= or steps="):
            sites_of(model, "0", [0], None, 0, halves=True)
    finally:
        del KINDS["halves"]


def test_heads_read_through_the_site_match_the_projection_input():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=4, vocab_size=31, n_positions=8, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 31, (2, 5))
    found = resolve(model, "transformer.h.0.attn", heads=[2, 0])
    (site,) = found
    assert (site.name, site.at, site.event, site.kind) == ("transformer.h.0.attn", "transformer.h.0.attn.c_proj", "forward_pre", "heads")
    with hookkit.capture(model, "transformer.h.0.attn.c_proj", inputs=True) as z, torch.no_grad():
        model(ids)
    with hookkit.capture(model, "transformer.h.0.attn", heads=[2, 0]) as cap, torch.no_grad():
        model(ids)
    zz = z.calls("transformer.h.0.attn.c_proj")[0].inputs[0].reshape(2, 5, 4, 4).permute(0, 2, 1, 3)  # [B, H, T, d]
    torch.testing.assert_close(cap["transformer.h.0.attn"], zz[:, [2, 0]], rtol=0, atol=0)
    assert site.part is not WHOLE and site.entry == "hookkit"  # made outside any public function


def test_the_verbs_use_no_intervention_internals_and_old_paths_still_import():
    import importlib
    import sys

    from hookkit.analyses.transformer import attribution_tap, patching
    from hookkit.core import deprecation
    from hookkit.interventions.output_edits import Converted, apply_to  # noqa: F401
    from hookkit.sites import heads

    moved = {
        "hookkit.analyses.patching": patching,
        "hookkit.analyses.attribution_tap": attribution_tap,
        "hookkit.interventions.heads": heads,
    }
    for old, new in moved.items():  # the old path is the new module, with one warning naming the new path
        sys.modules.pop(old, None)
        deprecation._warned.discard(old)
        with pytest.warns(FutureWarning, match=rf"^{old} is deprecated .*; use {new.__name__}$"):
            assert importlib.import_module(old) is new
        assert new.__spec__.name == new.__name__  # the module keeps its own spec (importlib.reload works)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from hookkit.analyses.attribution_tap import LayerTap  # warned once per process: not again
    assert LayerTap is attribution_tap.LayerTap
    flat = [p.name for p in (Path(hookkit.__file__).parent / "analyses").glob("*.py")]
    assert not {"lens.py", "patching.py", "patterns.py", "attribution_patching.py", "attribution_tap.py"} & set(flat)  # no re-export module
    assert hookkit.patching_sweep.__module__ == "hookkit.analyses.transformer.patching"
