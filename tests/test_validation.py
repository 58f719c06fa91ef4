"""Every public argument is checked at the call: a table over hookkit's public API (both frameworks),
then property tests (hypothesis) for the numeric arguments of the interventions and statistics.

Each bad call must raise before any forward runs, with a message naming the function, the argument
and the value given, and leave no hook behind.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hookkit
import hookkit.viz
from hookkit.core.entry import entered
from hookkit.core.validate import (
    ArgumentTypeError,
    InvalidArgument,
    check_callable,
    check_choice,
    check_number,
    check_range_pair,
    check_tensor_like,
)
from models import hooks_left

NAN, INF = float("nan"), float("inf")


def _other_tensor(fw):
    """A tensor of the other framework than ``fw``'s."""
    if fw.name == "torch":
        import paddle

        return paddle.zeros([2, 1, 8, 8])
    import torch

    return torch.zeros(2, 1, 8, 8)


# (id, call(model, fw), exception, fragments the message must hold). The model is fw.small_cnn():
# conv1, bn1, relu1, pool1, conv2, relu2, pool2, flatten, fc.
CASES = [
    # interventions
    ("noise-nan", lambda m, fw: hookkit.gaussian_noise(m, "conv1", std=NAN), ValueError, ["gaussian_noise()", "std", "nan"]),
    ("noise-neg", lambda m, fw: hookkit.gaussian_noise(m, "conv1", std=-1), ValueError, ["gaussian_noise()", "std", ">= 0", "-1"]),
    ("noise-str", lambda m, fw: hookkit.gaussian_noise(m, "conv1", std="0.1"), TypeError, ["gaussian_noise()", "std", "'0.1'"]),
    ("dropout-p", lambda m, fw: hookkit.dropout(m, "conv1", p=1.5), ValueError, ["dropout()", "p", "[0, 1]", "1.5"]),
    ("dropout-nan", lambda m, fw: hookkit.dropout(m, "conv1", p=NAN), ValueError, ["dropout()", "p", "nan"]),
    ("dropout-bool", lambda m, fw: hookkit.dropout(m, "conv1", p=True), TypeError, ["dropout()", "p", "True"]),
    ("chdrop-p", lambda m, fw: hookkit.channel_dropout(m, "conv1", p=-0.1), ValueError, ["channel_dropout()", "p", "-0.1"]),
    ("droppath-p", lambda m, fw: hookkit.drop_path(m, "conv1", p=2), ValueError, ["drop_path()", "p", "2"]),
    (
        "droppath-flag",
        lambda m, fw: hookkit.drop_path(m, "conv1", p=0.1, scale_by_keep="no"),
        TypeError,
        ["drop_path()", "scale_by_keep", "'no'"],
    ),
    ("dropblock-gamma", lambda m, fw: hookkit.drop_block(m, "conv1", gamma_scale=-5), ValueError, ["drop_block()", "gamma_scale", "-5"]),
    (
        "dropblock-gamma-inf",
        lambda m, fw: hookkit.drop_block(m, "conv1", gamma_scale=INF),
        ValueError,
        ["drop_block()", "gamma_scale", "inf"],
    ),
    ("dropblock-size", lambda m, fw: hookkit.drop_block(m, "conv1", block_size=0), ValueError, ["drop_block()", "block_size", "0"]),
    ("mask-none", lambda m, fw: hookkit.mask_activations(m, "conv1"), ValueError, ["mask_activations()", "exactly one"]),
    (
        "mask-thr-nan",
        lambda m, fw: hookkit.mask_activations(m, "conv1", threshold=NAN),
        ValueError,
        ["mask_activations()", "threshold", "nan"],
    ),
    ("mask-topk-0", lambda m, fw: hookkit.mask_activations(m, "conv1", top_k=0), ValueError, ["mask_activations()", "top_k", "0"]),
    ("mask-topk-float", lambda m, fw: hookkit.mask_activations(m, "conv1", top_k=2.5), TypeError, ["mask_activations()", "top_k", "2.5"]),
    (
        "mask-ch-str",
        lambda m, fw: hookkit.mask_activations(m, "conv1", channels="abc"),
        TypeError,
        ["mask_activations()", "channels", "'abc'"],
    ),
    (
        "mask-ch-2d",
        lambda m, fw: hookkit.mask_activations(m, "conv1", channels=[[1, 0]]),
        ValueError,
        ["mask_activations()", "channels", "1 dims"],
    ),
    ("ablate-mode", lambda m, fw: hookkit.ablate(m, "conv1", mode="one"), ValueError, ["ablate()", "mode", "'zero', 'mean'", "'one'"]),
    ("ablate-mean", lambda m, fw: hookkit.ablate(m, "conv1", mode="mean", mean="abc"), TypeError, ["ablate()", "mean", "'abc'"]),
    ("steer-vec", lambda m, fw: hookkit.steer(m, "fc", "abc"), TypeError, ["steer()", "vector", "'abc'"]),
    ("steer-other-fw", lambda m, fw: hookkit.steer(m, "fc", _other_tensor(fw)), TypeError, ["steer()", "vector", "{fw}"]),
    ("steer-scale", lambda m, fw: hookkit.steer(m, "fc", np.zeros(10), scale=NAN), ValueError, ["steer()", "scale", "nan"]),
    ("edit-fn", lambda m, fw: hookkit.edit(m, "fc", 3), TypeError, ["edit()", "fn", "callable", "3"]),
    ("edit-calls", lambda m, fw: hookkit.edit(m, "fc", lambda t, ev: t, calls="all"), TypeError, ["edit()", "calls", "'all'"]),
    ("edit-calls-neg", lambda m, fw: hookkit.edit(m, "fc", lambda t, ev: t, calls=[-1]), ValueError, ["edit()", "calls", "-1"]),
    ("edit-index", lambda m, fw: hookkit.edit(m, "fc", lambda t, ev: t, index=-1), TypeError, ["edit()", "index", "-1"]),
    ("patch-index", lambda m, fw: hookkit.patch(m, "fc", np.zeros(10), index=1.5), TypeError, ["patch()", "index", "1.5"]),
    ("clip-value", lambda m, fw: hookkit.clip_grad(m, "fc", value=0), ValueError, ["clip_grad()", "value", "> 0", "0"]),
    ("clip-norm-nan", lambda m, fw: hookkit.clip_grad(m, "fc", norm=NAN), ValueError, ["clip_grad()", "norm", "nan"]),
    ("clip-target", lambda m, fw: hookkit.clip_grad(m, "fc", value=1, target="x"), ValueError, ["clip_grad()", "target", "'x'"]),
    ("prune-amount", lambda m, fw: hookkit.prune(m, "fc", amount=1.5), ValueError, ["prune()", "amount", "1.5"]),
    ("prune-amount-str", lambda m, fw: hookkit.prune(m, "fc", amount="a"), TypeError, ["prune()", "amount", "'a'"]),
    ("prune-method", lambda m, fw: hookkit.prune(m, "fc", method="x"), ValueError, ["prune()", "method", "'x'"]),
    ("stop-call", lambda m, fw: hookkit.stop_after(m, "fc", call=-1), ValueError, ["stop_after()", "call", "-1"]),
    ("run-until-many", lambda m, fw: hookkit.run_until(m, "conv*"), ValueError, ["run_until()", "exactly one layer", "conv1, conv2"]),
    # registration
    ("on-forward-fn", lambda m, fw: hookkit.on_forward(m, "fc", 3), TypeError, ["on_forward()", "fn", "callable", "3"]),
    ("on-forward-pre-fn", lambda m, fw: hookkit.on_forward_pre(m, "fc", None), TypeError, ["on_forward_pre()", "fn", "None"]),
    ("on-backward-fn", lambda m, fw: hookkit.on_backward(m, "fc", "x"), TypeError, ["on_backward()", "fn", "'x'"]),
    ("on-output-grad-fn", lambda m, fw: hookkit.on_output_grad(m, "fc", 1.0), TypeError, ["on_output_grad()", "fn", "1.0"]),
    (
        "on-forward-prio",
        lambda m, fw: hookkit.on_forward(m, "fc", print, priority="high"),
        TypeError,
        ["on_forward()", "priority", "'high'"],
    ),
    ("on-grad-fn", lambda m, fw: hookkit.on_grad(fw.randn(2, requires_grad=True), 3), TypeError, ["on_grad()", "fn", "3"]),
    # observers
    ("capture-keep", lambda m, fw: hookkit.capture(m, "fc", keep=0), ValueError, ["capture", "keep", "0"]),
    ("capture-grads", lambda m, fw: hookkit.capture(m, "fc", grads="yes"), TypeError, ["capture()", "grads", "'yes'"]),
    ("capture-to", lambda m, fw: hookkit.capture(m, "fc", to="cuda:7"), ValueError, ["capture()", "to", "'cuda:7'"]),
    ("capture-to-bad", lambda m, fw: hookkit.capture(m, "fc", to="banana"), ValueError, ["capture()", "to", "'banana'"]),
    ("astats-near-zero", lambda m, fw: hookkit.ActivationStats(m, near_zero=NAN), ValueError, ["ActivationStats()", "near_zero", "nan"]),
    ("astats-range-inf", lambda m, fw: hookkit.ActivationStats(m, range=(0, INF)), ValueError, ["ActivationStats()", "range", "inf"]),
    ("astats-range-int", lambda m, fw: hookkit.ActivationStats(m, range=5), TypeError, ["ActivationStats()", "range", "(low, high)", "5"]),
    ("astats-range-order", lambda m, fw: hookkit.ActivationStats(m, range=(3, 1)), ValueError, ["ActivationStats()", "range", "(3, 1)"]),
    ("astats-bins", lambda m, fw: hookkit.ActivationStats(m, bins=0), ValueError, ["ActivationStats()", "bins", "0"]),
    ("astats-every", lambda m, fw: hookkit.ActivationStats(m, every=1.5), TypeError, ["ActivationStats()", "every", "1.5"]),
    ("astats-hist", lambda m, fw: hookkit.ActivationStats(m, hist="yes"), TypeError, ["ActivationStats()", "hist", "'yes'"]),
    ("gstats-every", lambda m, fw: hookkit.GradientStats(m, every=0), ValueError, ["GradientStats()", "every", "0"]),
    ("nonfinite-explode", lambda m, fw: hookkit.watch_nonfinite(m, explode=-1), ValueError, ["watch_nonfinite()", "explode", "-1"]),
    ("nonfinite-vanish", lambda m, fw: hookkit.watch_nonfinite(m, vanish=NAN), ValueError, ["watch_nonfinite()", "vanish", "nan"]),
    ("nonfinite-grads", lambda m, fw: hookkit.watch_nonfinite(m, grads="no"), TypeError, ["watch_nonfinite()", "grads", "'no'"]),
    (
        "gradcam-target-str",
        lambda m, fw: hookkit.gradcam(m, "conv2", fw.randn(3, 1, 8, 8), target="cat"),
        TypeError,
        ["gradcam()", "target", "'cat'"],
    ),
    (
        "gradcam-target-len",
        lambda m, fw: hookkit.gradcam(m, "conv2", fw.randn(2, 1, 8, 8), target=[1, 2, 3]),
        ValueError,
        ["gradcam()", "target", "2 entries"],
    ),
    (
        "gradcam-target-range",
        lambda m, fw: hookkit.gradcam(m, "conv2", fw.randn(2, 1, 8, 8), target=10),
        ValueError,
        ["gradcam()", "target", "[0, 9]", "10"],
    ),
    ("gradcam-inputs-fw", lambda m, fw: hookkit.gradcam(m, "conv2", _other_tensor(fw)), TypeError, ["gradcam()", "inputs", "{fw} model"]),
    (
        "gradcam-inputs-str",
        lambda m, fw: hookkit.gradcam_plus_plus(m, "conv2", "img.png"),
        TypeError,
        ["gradcam_plus_plus()", "inputs", "'img.png'"],
    ),
    (
        "gradcam-int-pixels",
        lambda m, fw: hookkit.gradcam(m, "conv2", np.zeros((2, 1, 8, 8), np.uint8)),
        ValueError,
        ["gradcam()", "inputs", "floating-point"],
    ),
    (
        "gradcam-layer-many",
        lambda m, fw: hookkit.gradcam(m, "conv*", fw.randn(2, 1, 8, 8)),
        ValueError,
        ["gradcam()", "exactly one layer", "conv1, conv2"],
    ),
    (
        "summary-other-fw",
        lambda m, fw: hookkit.summary(m, input_data=_other_tensor(fw)),
        TypeError,
        ["summary()", "input_data", "{fw} model"],
    ),
    ("patch-values", lambda m, fw: hookkit.patch(m, "fc", "abc"), TypeError, ["patch()", "values", "'abc'"]),
    ("on-grad-tensor", lambda m, fw: hookkit.on_grad(m, print), TypeError, ["on_grad()", "tensor", "a tensor"]),
    ("drophook-fn", lambda m, fw: hookkit.DropHookModel(m, [m.fc], [3]), TypeError, ["DropHookModel()", "hook_funcs[0]", "callable", "3"]),
    (
        "drophook-type",
        lambda m, fw: hookkit.DropHookModel(m, [m.fc], [print], ["post"]),
        ValueError,
        ["DropHookModel()", "hook_types[0]", "'post'"],
    ),
    # fastai's names
    ("hook-fn", lambda m, fw: hookkit.Hook(m.fc, 3), TypeError, ["Hook()", "hook_func", "3"]),
    ("hook-output-module", lambda m, fw: hookkit.hook_output(3), TypeError, ["Hook()", "m", "3"]),
    ("dummy-eval-size", lambda m, fw: hookkit.dummy_eval(m, size="x"), TypeError, ["dummy_eval()", "size", "'x'"]),
    # files and reports
    ("report-source", lambda m, fw: hookkit.report(3), TypeError, ["report()", "source", "3"]),
    ("report-title", lambda m, fw: hookkit.report("run", title=3), TypeError, ["report()", "title", "3"]),
    ("load-stats-dir", lambda m, fw: hookkit.load_stats(3), TypeError, ["load_stats()", "directory", "3"]),
    ("remove-all-model", lambda m, fw: hookkit.remove_all("model"), TypeError, ["remove_all()", "model", "'model'"]),
    # selection
    ("select-type", lambda m, fw: hookkit.select(m, 3), TypeError, ["layers", "3"]),
    ("select-sequential", lambda m, fw: hookkit.capture(fw.mlp(), "9"), LookupError, ["'9'", "closest: 0, 1, 2"]),
    ("dropout-model", lambda m, fw: hookkit.dropout("model", "fc", p=0.1), TypeError, ["dropout()", "model", "'model'"]),
    ("steer-model", lambda m, fw: hookkit.steer(fw.randn(2), "fc", [1.0]), TypeError, ["steer()", "model", "tensor"]),
    ("prune-model", lambda m, fw: hookkit.prune(None, "fc"), TypeError, ["prune()", "model", "None"]),
    ("summary-model", lambda m, fw: hookkit.summary("model", (1, 2)), TypeError, ["summary()", "model", "'model'"]),
    ("stop-model", lambda m, fw: hookkit.stop_after(3, "fc"), TypeError, ["stop_after()", "model", "3"]),
    ("model-str", lambda m, fw: hookkit.capture("model", "fc"), TypeError, ["capture()", "model", "'model'"]),
    ("model-tensor", lambda m, fw: hookkit.ActivationStats(fw.randn(2)), TypeError, ["ActivationStats()", "model", "tensor"]),
    # checks that meet the model at the forward: still named after the call and its argument
    (
        "mask-top-k-large",
        lambda m, fw: _forward(hookkit.mask_activations(m, "fc", top_k=100), m, fw),
        ValueError,
        ["mask_activations()", "top_k", "at most the 10 values per sample of layer 'fc'", "got 100"],
    ),
    (
        "drop-block-not-4d",
        lambda m, fw: _forward(hookkit.drop_block(m, "fc", p=0.5), m, fw),
        ValueError,
        ["drop_block_2d()", "x", "(N, C, H, W)", "shape [2, 10]"],
    ),
    (
        "steer-vector-shape",
        lambda m, fw: _forward(hookkit.steer(m, "fc", np.ones(3)), m, fw),
        ValueError,
        ["steer()", "vector", "[10]", "[3]"],
    ),
    (
        "ablate-mean-layers",
        lambda m, fw: hookkit.ablate(m, "fc", mode="mean", mean={"conv1": np.ones(10)}),
        ValueError,
        ["ablate()", "mean", "selected: fc; missing: fc; not selected: conv1"],
    ),
    (
        "patch-values-shape",
        lambda m, fw: _forward(hookkit.patch(m, "fc", np.ones((2, 3))), m, fw),
        ValueError,
        ["patch()", "values", "[2, 10]"],
    ),
    ("patch-dict-key", lambda m, fw: hookkit.patch(m, "fc", {("fc",): np.ones(3)}), TypeError, ["patch()", "values", "(name, call)"]),
    ("run-until-options", lambda m, fw: hookkit.run_until(m, "fc", grads=True), TypeError, ["run_until()", "capture", "grads"]),
    ("prune-param", lambda m, fw: hookkit.prune(m, "fc", param="gamma"), ValueError, ["prune()", "param", "'gamma'"]),
    ("dummy-eval-no-conv", lambda m, fw: hookkit.dummy_eval(fw.mlp()), ValueError, ["dummy_eval()", "m", "4 dimensions"]),
    (
        "summary-dtypes-count",
        lambda m, fw: hookkit.summary(m, (2, 1, 8, 8), dtypes=["float32"] * 2),
        ValueError,
        ["summary()", "dtypes", "(1)"],
    ),
    ("summary-mode", lambda m, fw: hookkit.summary(m, (2, 1, 8, 8), mode="infer"), ValueError, ["summary()", "mode", "'infer'"]),
    (
        "viz-feature-maps-type",
        lambda m, fw: hookkit.viz.feature_maps("img.png"),
        TypeError,
        ["feature_maps()", "capture_or_tensor", "'img.png'"],
    ),
    (
        "viz-overlay-count",
        lambda m, fw: hookkit.viz.gradcam_overlay(np.zeros((2, 1, 4, 4)), np.zeros((3, 4, 4))),
        ValueError,
        ["gradcam_overlay()", "cams", "one heatmap per image (2)"],
    ),
    ("viz-gradient-flow-kind", lambda m, fw: hookkit.viz.gradient_flow(None, "var"), ValueError, ["gradient_flow()", "kind", "'var'"]),
    (
        "drophook-lengths",
        lambda m, fw: hookkit.DropHookModel(m, [m.fc, m.conv1], [print]),
        ValueError,
        ["DropHookModel()", "hook_funcs", "(2)"],
    ),
    ("monitor-every", lambda m, fw: _monitor(every=0), ValueError, ["Monitor()", "every", "an int >= 1", "got 0"]),
    ("quadrature-rule", lambda m, fw: _quadrature("simpson", 4), ValueError, ["quadrature()", "rule", "'simpson'"]),
]


def _forward(group, model, fw):
    """Run one forward under ``group`` (an edit attached to ``model``): errors found at the forward."""
    with group:
        model(fw.randn(2, 1, 8, 8))


def _monitor(**kwargs):
    from hookkit.integrations._common import Monitor

    return Monitor(**kwargs)


def _quadrature(rule, n):
    from hookkit.analyses.attribution.rules import quadrature

    return quadrature(rule, n)


@pytest.mark.parametrize("call, exc, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_at_the_call(fw, call, exc, fragments):
    model = fw.small_cnn()
    with pytest.raises(exc) as err:
        call(model, fw)
    message = str(err.value)
    for fragment in fragments:
        fragment = fragment.replace("{fw}", fw.name)
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert isinstance(err.value, hookkit.HookkitError), f"{type(err.value).__name__}: {message}"
    assert hooks_left(model) == []


def test_layer_class_of_the_other_framework_is_named(fw):
    other = _other_tensor(fw)
    other_linear = type(other).__module__.split(".")[0]
    import importlib

    lib = importlib.import_module(other_linear)
    with pytest.raises(hookkit.LayerNotFound, match=f"Linear is a {other_linear} class and the model is a {fw.name} model"):
        hookkit.capture(fw.mlp(), lib.nn.Linear)


def test_root_model_shows_as_root(fw):
    model = fw.mlp()
    with pytest.raises(ValueError, match=r"matches 4: \(root\), 0, 1, 2"):
        hookkit.stop_after(model, hookkit.ALL)
    assert hookkit.select.__module__  # (root) is only a display name: select still returns ''
    assert hookkit.select(model, hookkit.ALL)[0][0] == ""


def test_capture_to_an_absent_accelerator_names_the_device(fw):
    with pytest.raises(ValueError) as err:
        hookkit.capture(fw.mlp(), to="cuda")
    assert "capture(): to must be" in str(err.value)
    assert "'cuda'" in str(err.value) and "device" in str(err.value)


# -- the helper itself ----------------------------------------------------------------------------
def test_helper_messages_and_types():
    with entered("f"):  # the checks name the public entry the user called
        _helper_messages_and_types()
    # outside any entry they name hookkit
    with pytest.raises(InvalidArgument, match=r"^hookkit\(\): x must be"):
        check_number(-1, arg="x", low=0)


def _helper_messages_and_types():
    with pytest.raises(InvalidArgument, match=r"^f\(\): x must be a finite number >= 0; got -1$"):
        check_number(-1, arg="x", low=0)
    with pytest.raises(ArgumentTypeError, match=r"f\(\): x must be an int in \[1, 3\]; got True"):
        check_number(True, arg="x", low=1, high=3, integer=True)
    assert check_number(np.float32(0.5), arg="x", low=0, high=1) == 0.5
    assert check_number(None, arg="x", optional=True) is None
    assert check_range_pair([0, 2], arg="r") == (0.0, 2.0)
    with pytest.raises(ValueError, match=r"r must be a \(low, high\) pair"):
        check_range_pair((1, NAN), arg="r")
    with pytest.raises(ValueError, match="one of 'a', 'b'; got 'c'"):
        check_choice("c", ("a", "b"), arg="m")
    with pytest.raises(ValueError):
        check_choice(True, (1, 2), arg="m")  # True is not 1 here
    with pytest.raises(TypeError, match="callable as g\\(x\\)"):
        check_callable(3, arg="g", signature="g(x)")
    # both errors are also the other kind, so old `except ValueError` code keeps working
    assert issubclass(ArgumentTypeError, ValueError) and issubclass(ArgumentTypeError, TypeError)


def test_check_tensor_like_converts_numpy(fw):
    from hookkit.backends import backend_for

    be = backend_for(fw.mlp())
    t = check_tensor_like(np.arange(6).reshape(2, 3), be, arg="x", ndim=2)
    assert be.is_tensor(t) and be.shape(t) == (2, 3) and be.dtype_name(t) == "int64"
    t = check_tensor_like([[1.5, 2.0]], be, arg="x")
    assert be.dtype_name(t) == "float32"
    with pytest.raises(ValueError, match="x must be a tensor with 1 dims"):
        check_tensor_like(np.zeros((2, 2)), be, arg="x", ndim=1)
    with pytest.raises(TypeError, match="of numbers"):
        check_tensor_like(["a", "b"], be, arg="x")


# -- property tests: the numeric arguments of the interventions and statistics -----------------------
_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.sampled_from([True, False, None, "0.5", [0.1], (0.1, 0.2)]),
)
_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _is_real(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _accepts(call, value):
    """True when the call accepted the value; a refusal must be a HookkitError naming the value."""
    try:
        h = call(value)
    except hookkit.HookkitError as e:
        assert "must be" in str(e) and "got" in str(e), str(e)
        return False
    h.remove()
    return True


@pytest.fixture(scope="module")
def torch_model():
    torch = pytest.importorskip("torch")
    return torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU())


@_SETTINGS
@given(p=_numbers)
def test_probabilities_accept_exactly_the_unit_interval(torch_model, p):
    ok = _is_real(p) and 0 <= p <= 1
    for fn in (hookkit.dropout, hookkit.channel_dropout, hookkit.drop_path, hookkit.drop_block):
        assert _accepts(lambda v, fn=fn: fn(torch_model, "0", p=v), p) == ok, (fn.__name__, p)
    assert hooks_left(torch_model) == []


@_SETTINGS
@given(value=_numbers)
def test_non_negative_finite_numbers(torch_model, value):
    ok = _is_real(value) and math.isfinite(value) and value >= 0
    assert _accepts(lambda v: hookkit.gaussian_noise(torch_model, "0", std=v), value) == ok
    assert _accepts(lambda v: hookkit.drop_block(torch_model, "0", gamma_scale=v), value) == ok
    assert _accepts(lambda v: hookkit.mask_activations(torch_model, "0", threshold=v), value) == ok
    positive = ok and value > 0
    assert _accepts(lambda v: hookkit.clip_grad(torch_model, "0", value=v), value) == positive
    assert _accepts(lambda v: hookkit.clip_grad(torch_model, "0", norm=v), value) == positive
    assert hooks_left(torch_model) == []


@_SETTINGS
@given(near_zero=_numbers, every=_numbers, bins=_numbers)
def test_activation_stats_numbers(torch_model, near_zero, every, bins):
    def ok_int(v):
        return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1 << 20

    ok = _is_real(near_zero) and math.isfinite(near_zero) and ok_int(every) and ok_int(bins)
    assert _accepts(lambda _: hookkit.ActivationStats(torch_model, near_zero=near_zero, every=every, bins=bins), None) == ok


@_SETTINGS
@given(lo=st.floats(allow_nan=True, allow_infinity=True), hi=st.floats(allow_nan=True, allow_infinity=True))
def test_histogram_range_pairs(torch_model, lo, hi):
    ok = math.isfinite(lo) and math.isfinite(hi) and lo < hi
    assert _accepts(lambda _: hookkit.ActivationStats(torch_model, hist=True, range=(lo, hi)), None) == ok


@_SETTINGS
@given(top_k=_numbers, explode=_numbers)
def test_counts_and_thresholds(torch_model, top_k, explode):
    ok = isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 1
    assert _accepts(lambda v: hookkit.mask_activations(torch_model, "0", top_k=v), top_k) == ok
    ok = explode is None or (_is_real(explode) and math.isfinite(explode) and explode >= 0)
    assert _accepts(lambda v: hookkit.watch_nonfinite(torch_model, explode=v), explode) == ok


def test_capture_to_accepts_the_frameworks_own_device_objects(fw):
    model = fw.mlp()
    device = fw.lib.device("cpu") if fw.name == "torch" else fw.lib.CPUPlace()
    with hookkit.capture(model, "0", to=device) as cap:
        model(fw.randn(2, 5))
    assert fw.numpy(cap["0"]).shape == (2, 10)


@pytest.mark.parametrize("where", ["WeightStats", "summary"])
def test_an_object_that_is_no_optimizer_is_refused_by_name(fw, where):
    model = fw.mlp()
    with pytest.raises(TypeError, match=rf"{where}\(\): optimizer must be None or an optimizer of the model's framework \({fw.name}\)"):
        if where == "WeightStats":
            hookkit.WeightStats(model, optimizer="adam")
        else:
            hookkit.summary(model, (2, 5), mode="train", optimizer="adam")
    assert hooks_left(model) == []


def test_a_training_summary_of_a_model_without_tensor_output_asks_for_loss_fn(fw):
    class Labels(fw.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.fc = fw.linear(5, 3)

        def forward(self, x):
            self.fc(x)
            return {"label": "no tensor here"}

    model = Labels()
    with pytest.raises(ValueError, match=r"summary\(\): loss_fn must be a function of the model's output giving a scalar loss"):
        hookkit.summary(model, (2, 5), mode="train", optimizer=fw.adam(model))
    assert hooks_left(model) == []
