"""hookkit.SAE: SAELens folders read as data, encode/decode/forward equal to each architecture's
formula (numpy here; SAELens itself where it is installed), on both frameworks."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

from hookkit.core.files import InvalidFile
from hookkit.core.validate import InvalidArgument
from hookkit.sae import SAE, SAEFileError
from sae_helpers import np_decode, np_encode, np_forward, random_weights, write_folder, write_safetensors
from tolerance import assert_close

ARCHS = [
    "standard",
    "topk",
    "jumprelu",
    "gated",
    "batchtopk",
    "transcoder",
    "skip_transcoder",
    "jumprelu_transcoder",
    "jumprelu_skip_transcoder",
]
# float32 against a float64 reference: sums of d_in=12 / d_sae=32 products of O(1) values
TOL = dict(rtol=1e-5, atol=2e-5)


def _folder(tmp_path, arch, rng, **cfg):
    d_out = 6 if "transcoder" in arch else None
    w = random_weights(arch, 12, 32, rng, d_out=d_out)
    if arch == "topk":
        cfg.setdefault("k", 5)
    return write_folder(str(tmp_path / arch), arch, w, **cfg), w


@pytest.mark.parametrize("arch", ARCHS)
def test_encode_decode_forward_match_the_formula(fw, tmp_path, rng, arch):
    folder, w = _folder(tmp_path, arch, rng)
    sae = SAE.load(folder, framework=fw.name)
    x = rng.normal(size=(3, 4, 12)).astype(np.float32)
    feats = sae.encode(fw.tensor(x))
    ref, _ = np_encode(arch, w, x, k=5)
    np.testing.assert_allclose(fw.numpy(feats), ref, **TOL)
    assert (fw.numpy(feats) > 0).any(), "a test whose features are all zero checks nothing"
    np.testing.assert_allclose(fw.numpy(sae.decode(feats)), np_decode(arch, w, ref), **TOL)
    np.testing.assert_allclose(fw.numpy(sae.forward(fw.tensor(x))), np_forward(arch, w, x, k=5), **TOL)
    assert sae.architecture == ("jumprelu" if arch == "batchtopk" else arch)
    assert sae.hook_name == "blocks.0.hook_resid_post"


def test_topk_keeps_k_and_constant_norm_rescale_round_trips(fw, tmp_path, rng):
    folder, w = _folder(tmp_path, "standard", rng, normalize_activations="constant_norm_rescale")
    sae = SAE.load(folder, framework=fw.name)
    x = (rng.normal(size=(5, 12)) * 7).astype(np.float32)
    ref = np_forward("standard", w, x, norm="constant_norm_rescale")
    np.testing.assert_allclose(fw.numpy(sae(fw.tensor(x))), ref, **TOL)
    folder, _ = _folder(tmp_path / "k", "topk", rng)
    feats = fw.numpy(SAE.load(folder, framework=fw.name).encode(fw.tensor(x)))
    assert ((feats != 0).sum(-1) <= 5).all()


def test_from_arrays_equals_load_and_save_round_trips(fw, tmp_path, rng):
    w = random_weights("jumprelu", 12, 32, rng)
    a = SAE.from_arrays(**w, architecture="jumprelu", framework=fw.name)
    b = SAE.load(write_folder(str(tmp_path / "j"), "jumprelu", w), framework=fw.name)
    x = fw.tensor(rng.normal(size=(4, 12)).astype(np.float32))
    np.testing.assert_array_equal(fw.numpy(a(x)), fw.numpy(b(x)))
    c = SAE.load(a.save(str(tmp_path / "saved")), framework=fw.name)
    np.testing.assert_array_equal(fw.numpy(c(x)), fw.numpy(a(x)))
    with open(tmp_path / "saved" / "cfg.json") as f:
        assert json.load(f)["architecture"] == "jumprelu"


def test_like_places_on_the_model_dtype(torch_fw, tmp_path, rng):
    import torch

    model = torch.nn.Linear(12, 12).to(torch.float64)
    folder, _ = _folder(tmp_path, "standard", rng)
    sae = SAE.load(folder, like=model)
    assert sae.W_enc.dtype == torch.float64 and sae.backend.name == "torch"
    with pytest.raises(InvalidArgument, match="framework"):
        SAE.load(folder, like=model, framework="paddle")


# -- bad folders ----------------------------------------------------------------------------------
def test_missing_key_names_file_key_and_shape(tmp_path, rng):
    w = random_weights("standard", 12, 32, rng)
    del w["b_enc"]
    folder = write_folder(str(tmp_path / "f"), "standard", w)
    with pytest.raises(SAEFileError, match=r"sae_weights\.safetensors.*'b_enc' missing \(expected shape \[32\]"):
        SAE.load(folder)


def test_wrong_shape_names_file_key_and_expected_shape(tmp_path, rng):
    w = random_weights("standard", 12, 32, rng)
    w["W_dec"] = w["W_dec"][:, :11]
    folder = write_folder(str(tmp_path / "f"), "standard", w)
    with pytest.raises(SAEFileError, match=r"sae_weights\.safetensors.*'W_dec' has shape \[32, 11\]; expected \[32, 12\]"):
        SAE.load(folder)
    w = random_weights("standard", 12, 32, rng)
    folder = write_folder(str(tmp_path / "g"), "standard", w, d_sae=31)
    with pytest.raises(SAEFileError, match=r"'W_enc' has shape \[12, 32\]; expected \[12, 31\]"):
        SAE.load(folder)


def test_pickle_files_are_refused(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    with open(folder / "sae_weights.pt", "wb") as f:
        pickle.dump({"W_enc": np.zeros((2, 2))}, f)
    (folder / "cfg.json").write_text("{}")
    with pytest.raises(SAEFileError, match=r"sae_weights\.safetensors: missing; found sae_weights\.pt: pickle"):
        SAE.load(folder)
    with pytest.raises(SAEFileError, match="pickle file"):
        SAE.load(folder / "sae_weights.pt")


def test_malformed_files_and_escaping_links_are_refused(tmp_path, rng):
    folder, w = _folder(tmp_path, "standard", rng)
    path = os.path.join(folder, "sae_weights.safetensors")
    with open(path, "r+b") as f:  # a header claiming more bytes than the file holds
        f.write((10**9).to_bytes(8, "little"))
    with pytest.raises(SAEFileError, match="header length"):
        SAE.load(folder)
    write_safetensors(path, w)
    with open(os.path.join(folder, "cfg.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(InvalidFile, match="cfg.json: not valid JSON"):
        SAE.load(folder)
    outside = tmp_path / "outside"
    outside.mkdir()
    write_folder(str(outside), "standard", w)
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink(outside / "cfg.json", linked / "cfg.json")
    os.symlink(outside / "sae_weights.safetensors", linked / "sae_weights.safetensors")
    with pytest.raises(SAEFileError, match="outside the folder"):
        SAE.load(linked)


def test_bad_config_values_and_dtypes_are_refused(tmp_path, rng):
    w = random_weights("standard", 12, 32, rng)
    w["b_enc"] = w["b_enc"].astype(np.int32)
    with pytest.raises(SAEFileError, match=r"sae_weights\.safetensors.*'b_enc' has dtype int32; expected a floating dtype"):
        SAE.load(write_folder(str(tmp_path / "int"), "standard", w))
    for cfg, match in [
        ({"architecture": "nope"}, "architecture 'nope'"),
        ({"normalize_activations": "x"}, "normalize_activations"),
        ({"k": 99}, "'k' must be"),
        ({"dtype": "int8"}, "dtype 'int8' is not a floating"),
    ]:
        folder, _ = _folder(tmp_path / str(len(match)), "topk", rng, **cfg)
        with pytest.raises(SAEFileError, match=match):
            SAE.load(folder)


# -- against SAELens itself, where it is installed ----------------------------------------------------
@pytest.mark.parametrize("arch", ["standard", "topk", "jumprelu", "gated", "skip_transcoder"])
def test_equals_sae_lens_on_folders_save_model_wrote(tmp_path, arch):
    sae_lens = pytest.importorskip("sae_lens")
    import torch
    from sae_lens.saes.gated_sae import GatedSAE, GatedSAEConfig
    from sae_lens.saes.transcoder import SkipTranscoder, SkipTranscoderConfig

    torch.manual_seed(0)
    make = {
        "standard": lambda: sae_lens.StandardSAE(sae_lens.StandardSAEConfig(d_in=12, d_sae=32)),
        "topk": lambda: sae_lens.TopKSAE(sae_lens.TopKSAEConfig(d_in=12, d_sae=32, k=5, rescale_acts_by_decoder_norm=True)),
        "jumprelu": lambda: sae_lens.JumpReLUSAE(sae_lens.JumpReLUSAEConfig(d_in=12, d_sae=32)),
        "gated": lambda: GatedSAE(GatedSAEConfig(d_in=12, d_sae=32)),
        "skip_transcoder": lambda: SkipTranscoder(SkipTranscoderConfig(d_in=12, d_sae=32, d_out=6, apply_b_dec_to_input=False)),
    }
    ref = make[arch]()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    ref.save_model(str(tmp_path))
    mine = SAE.load(tmp_path)
    x = torch.randn(4, 12)
    with torch.no_grad():
        torch.testing.assert_close(mine.encode(x), ref.encode(x), rtol=0, atol=1e-6)
        torch.testing.assert_close(mine(x), ref(x), rtol=0, atol=1e-6)
    torch.testing.assert_close(SAE.from_sae_lens(ref)(x), mine(x), rtol=0, atol=0)


def test_layer_norm_and_hook_z_settings(fw, tmp_path, rng):
    w = random_weights("standard", 12, 32, rng)
    folder = write_folder(str(tmp_path / "ln"), "standard", w, normalize_activations="layer_norm")
    sae = SAE.load(folder, framework=fw.name)
    x = (rng.normal(size=(5, 12)) * 3 + 2).astype(np.float32)
    mu, sd = x.mean(-1, keepdims=True), x.std(-1, ddof=1, keepdims=True)  # SAELens: torch's unbiased std, eps 1e-5
    feats = np.maximum(((x - mu) / (sd + 1e-5) - w["b_dec"]) @ w["W_enc"] + w["b_enc"], 0)
    np.testing.assert_allclose(fw.numpy(sae(fw.tensor(x))), (feats @ w["W_dec"] + w["b_dec"]) * sd + mu, **TOL)
    z = write_folder(str(tmp_path / "z"), "standard", w, reshape_activations="hook_z")
    sae = SAE.load(z, framework=fw.name)
    xz = rng.normal(size=(2, 3, 4, 3)).astype(np.float32)  # [batch, pos, heads, d_head]: 4 x 3 = d_in
    want = np_forward("standard", w, xz.reshape(2, 3, 12)).reshape(2, 3, 4, 3)
    np.testing.assert_allclose(fw.numpy(sae(fw.tensor(xz))), want, **TOL)


def test_the_same_sae_on_the_other_framework(tmp_path, rng):
    pytest.importorskip("paddle")
    folder, w = _folder(tmp_path, "gated", rng)
    a = SAE.load(folder, framework="torch")
    b = a.to(framework="paddle")
    x = rng.normal(size=(3, 12)).astype(np.float32)
    import torch

    # each framework's kernels: the encoder's 12-term dots (gate and magnitude), the decoder's 32-term dots
    assert_close(b(b.backend.from_numpy(x)), a(torch.from_numpy(x)), dtype="float32", n_ops=48)
    assert b.backend.name == "paddle" and "paddle" in repr(b)
