"""No silent no-ops: a selected layer that never ran is reported when read, a removed context cannot
be entered again, a misspelt keyword gets "did you mean", channels-last images are taken by
``cam_grid`` (or refused clearly), and warnings name the user's line."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import hookkit
from hookkit.observers.stats.loaded import EmptyLayerWarning


def _unused_branch(fw):
    class TwoHeads(fw.Layer):
        def __init__(self):
            super().__init__()
            self.used = fw.linear(5, 3)
            self.unused = fw.linear(5, 3)

        def forward(self, x):
            return self.used(x)

    return TwoHeads()


def test_statistics_of_a_layer_that_never_ran_warn_at_the_users_line(fw):
    model = _unused_branch(fw)
    with hookkit.ActivationStats(model, ["used", "unused"]) as stats:
        model(fw.randn(4, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(stats.layer_stats("used")["step"]) == 1  # a layer that ran: no warning
    with pytest.warns(EmptyLayerWarning, match="'unused' was selected but never ran") as seen:
        empty = stats.layer_stats("unused")
    assert len(empty["mean"]) == 0
    assert seen[0].filename == __file__


def test_gradient_statistics_of_a_layer_without_gradient_warn(fw):
    model = _unused_branch(fw)
    with hookkit.GradientStats(model, ["used", "unused"]) as stats:
        x = fw.randn(4, 5)
        model(x).sum().backward()
    with pytest.warns(EmptyLayerWarning, match="'unused' was selected but got no gradient"):
        stats.layer_stats("unused")


def test_capture_of_a_layer_that_never_ran_raises_naming_it(fw):
    model = _unused_branch(fw)
    with hookkit.capture(model, ["used", "unused"]) as cap:
        model(fw.randn(4, 5))
    assert fw.numpy(cap["used"]).shape == (4, 3)
    with pytest.raises(KeyError, match="'unused' has not run since the capture started"):
        cap["unused"]


@pytest.mark.parametrize(
    ("call", "wrong", "right"),
    [
        (lambda m, x: hookkit.capture(m, "0", grad=True), "grad", "grads="),
        (lambda m, x: hookkit.ActivationStats(m, "0", evry=2), "evry", "every="),
        (lambda m, x: hookkit.cam(m, "0", x, methd="gradcam"), "methd", "method="),
        (lambda m, x: hookkit.summary(m, input_sise=(1, 5)), "input_sise", "input_size="),
    ],
    ids=["capture", "ActivationStats", "cam", "summary"],
)
def test_unknown_keyword_gets_did_you_mean(fw, call, wrong, right):
    model = fw.mlp()
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{wrong}'") as info:
        call(model, fw.randn(2, 5))
    assert f"did you mean {right}" in info.value.__notes__[-1]
    assert hookkit.remove_all(model) == 0


def test_a_type_error_inside_a_public_function_gets_no_keyword_note(fw):
    model = fw.mlp()
    with pytest.raises(TypeError) as info:
        hookkit.capture(model, 3.5)  # a wrong layer spec: raised inside, not a keyword
    assert not any("did you mean" in n and "takes:" in n for n in getattr(info.value, "__notes__", ()))


def _image_data(fig):
    return [im.get_array() for ax in fig.axes for im in ax.get_images()]


def test_cam_grid_takes_channels_last_images_as_channels_first_ones(rng):
    from hookkit.viz import cam_grid

    first = rng.random((2, 3, 6, 6)).astype(np.float32)
    maps = {"a": rng.random((2, 6, 6))}
    a = _image_data(cam_grid(first, maps))
    b = _image_data(cam_grid(first.transpose(0, 2, 3, 1), maps))
    assert len(a) == len(b) == 6  # per image: the image, then the image under the map
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    gray = _image_data(cam_grid(first[:, :1].transpose(0, 2, 3, 1), maps))
    np.testing.assert_array_equal(np.asarray(gray[0]), np.asarray(_image_data(cam_grid(first[:, :1], maps))[0]))


def test_cam_grid_refuses_images_with_no_channel_axis_it_knows(rng):
    from hookkit.viz import cam_grid

    with pytest.raises(hookkit.HookkitError, match=r"cam_grid\(\).*channels last.*shape \(2, 5, 6, 7\)"):
        cam_grid(rng.random((2, 5, 6, 7)), {"a": rng.random((2, 6, 7))})


def test_public_functions_still_pickle_by_reference():
    import pickle

    for fn in (hookkit.cam, hookkit.capture, hookkit.summary, hookkit.extract):
        assert pickle.loads(pickle.dumps(fn)) is fn


def test_a_skipped_output_warning_names_the_users_line(fw):
    import hookkit.core.guards as guards

    class Tokens(fw.Layer):  # a layer returning integers: dropout leaves them alone, with one warning
        def forward(self, x):
            return (x * 100).astype("int64") if fw.name == "paddle" else (x * 100).long()

    model = fw.sequential(Tokens())
    guards._warned.clear()
    with hookkit.dropout(model, "0", p=0.5), pytest.warns(hookkit.core.validate.SkippedOutputWarning) as seen:
        model(fw.randn(2, 3))
    assert seen[0].filename == __file__


def test_shares_are_plotted_from_zero_to_one(fw):
    model = fw.mlp()
    with hookkit.ActivationStats(model, "0") as stats:
        for _ in range(3):
            model(fw.randn(8, 5))
    from hookkit.viz import plot_layer_stats, stats_overlay

    fig = plot_layer_stats(stats, "0")
    assert fig.axes[2].get_ylim() == (0.0, 1.0)  # the near-zero fraction
    assert fig.axes[0].get_ylim() != (0.0, 1.0)  # the mean keeps its own range
    assert stats_overlay(stats, "near_zero").axes[0].get_ylim() == (0.0, 1.0)
