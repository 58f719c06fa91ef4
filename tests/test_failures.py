"""A framework error inside a hooked forward names the layer that raised, its call and the inputs it
got, under every verb that runs or hooks the model, on both frameworks: the same exception (its type
and message kept, ``except RuntimeError`` still works) with one note."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import hookkit

# SmallCNN for 8x8 inputs given 12x12 ones: both convs run, then ``fc`` gets 16 * 3 * 3 = 144
# features where it takes 64 -- the failing layer is deep inside, and its input is not the model's.
BAD_INPUT = (2, 1, 12, 12)
FC_GOT = "(2, 144) float32"


def _with(ctx):
    def run(model, x):
        with ctx(model):
            model(x)

    return run


VERBS = {
    "capture": _with(lambda m: hookkit.capture(m, "fc")),
    "capture-other-layer": _with(lambda m: hookkit.capture(m, "conv1")),
    "on_forward": _with(lambda m: hookkit.on_forward(m, "fc", lambda layer, args, out: None)),
    "ActivationStats": _with(lambda m: hookkit.ActivationStats(m, "fc")),
    "ablate": _with(lambda m: hookkit.ablate(m, "fc")),
    "watch_nonfinite": _with(lambda m: hookkit.watch_nonfinite(m)),
    "cam": lambda m, x: hookkit.cam(m, "conv2", x, target=0),
    "gradcam": lambda m, x: hookkit.gradcam(m, "conv2", x, target=0),
    "attribute": lambda m, x: hookkit.attribute(m, "conv1", x, "gradient", target=0),
    "diff": lambda m, x: hookkit.diff(m, copy.deepcopy(m), x),
    "extract": lambda m, x: hookkit.extract(m, [x], "conv1", _tmp()),
    "cam_metric": lambda m, x: hookkit.cam_metric(m, x, np.ones((2, 12, 12), np.float32), target=0),
}
# the verbs whose hooks on ``fc`` are in place when the error is explained: the call is known
COUNTED = {"capture", "on_forward", "ActivationStats", "ablate", "watch_nonfinite"}
_TMP: list = []


def _tmp():
    return _TMP[-1]


@pytest.mark.parametrize("verb", list(VERBS))
def test_framework_error_names_layer_call_and_inputs(fw, verb, tmp_path):
    _TMP.append(tmp_path / "features")
    model = fw.small_cnn()
    x = fw.randn(*BAD_INPUT)
    with pytest.raises(Exception) as info:
        VERBS[verb](model, x)
    exc = info.value
    assert not isinstance(exc, hookkit.HookkitError)  # the framework's own exception, kept
    notes = [n for n in getattr(exc, "__notes__", ()) if n.startswith("hookkit: the forward failed")]
    assert len(notes) == 1, getattr(exc, "__notes__", None)
    note = notes[0]
    assert "in layer 'fc' (Linear" in note
    assert f"inputs {FC_GOT}" in note
    shown = verb.split("-")[0]
    if shown not in ("on_forward", "ablate"):  # on_forward and ablate return plain groups of handles
        assert f"under {shown}()" in note
    if verb in COUNTED:
        assert "call 0)" in note
    assert exc.hookkit_failed_layer == "fc"
    assert hookkit.remove_all(model) == 0  # nothing left behind


def test_wrong_dtype_names_the_expected_one(fw):
    model = fw.mlp()
    x = fw.tensor(np.ones((4, 5)), dtype="float64")
    with pytest.raises(Exception) as info, hookkit.capture(model, "0"):
        model(x)
    note = info.value.__notes__[-1]
    assert "in layer '0'" in note and "(4, 5) float64" in note
    assert "parameters are float32 and it got float64: pass float32 inputs" in note


def test_errors_that_name_their_layer_already_get_no_second_note(fw):
    model = fw.mlp()

    def boom(layer, args, out):
        raise ValueError("mine")

    with pytest.raises(ValueError) as info, hookkit.on_forward(model, "0", boom):
        model(fw.randn(4, 5))
    notes = info.value.__notes__
    assert len(notes) == 1 and "forward hook on layer '0'" in notes[0]


def test_an_error_outside_the_model_gets_no_note(fw):
    model = fw.mlp()
    with pytest.raises(KeyError) as info, hookkit.capture(model, "0"):
        model(fw.randn(4, 5))
        {}["nope"]
    assert not getattr(info.value, "__notes__", None)


def test_a_removed_context_cannot_be_entered_again(fw):
    model = fw.mlp()
    cap = hookkit.capture(model, "0")
    cap.remove()
    with pytest.raises(hookkit.HookkitError, match="this capture was removed"):
        with cap:
            pass
    with hookkit.capture(model, "0") as cap2:
        model(fw.randn(4, 5))
    with pytest.raises(hookkit.HookkitError, match="removed"):
        cap2.__enter__()
