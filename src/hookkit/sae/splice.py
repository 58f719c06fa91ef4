"""``hookkit.splice``: an SAE spliced into a model at a site, its features a site of their own.

At each call of the site the SAE encodes the site's activation and the features pass through a
pseudo-layer (``Splice.features``, a parameter-free layer that is not a child of the model: its
state_dict and named layers are unchanged). Every verb hooks it like a layer: ``capture`` reads the
features, ``steer``/``ablate``/``patch``/``edit`` change them, ``ActivationStats`` counts how often
each fires. The change flows back through the decoder: with the error term (the default) the site's
output becomes ``x + decode(features) - decode(clean features)`` (exactly ``x`` when nothing changed
them); without it, ``decode(features)`` replaces the activation.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from hookkit.backends import backend_for
from hookkit.core.entry import entered, public_entry
from hookkit.core.handles import Handle, HandleGroup
from hookkit.core.router import INTERVENTION, OBSERVER, Event, attach
from hookkit.core.select import LayerSpec, select
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, InvalidArgument, check_model, fail
from hookkit.interventions.output_edits import Edits, apply_to, check_index, edit, steer
from hookkit.observers.capture import TopK, capture
from hookkit.sae.model import SAE
from hookkit.sae.site import FeaturesSpec, add_spliced


class Splice(HandleGroup):
    """What ``hookkit.splice`` returns: ``features`` (the spec of the features' site), ``sae``,
    ``site``; ``steer_features``, ``ablate_features``, ``capture_top`` act on features by index.
    Removing it (or leaving its ``with`` block) restores the model."""

    @public_entry("splice")
    def __init__(
        self,
        model: Layer,
        site: LayerSpec,
        sae: SAE,
        *,
        error_term: bool,
        output_site: LayerSpec | None,
        name: str | None,
        index: int | None,
    ):
        super().__init__()
        check_model(model)
        if not isinstance(sae, SAE):
            fail(
                "splice",
                "sae",
                "a hookkit.SAE (SAE.load(folder), SAE.from_sae_lens(obj), SAE.from_arrays(...))",
                sae,
                kind=ArgumentTypeError,
            )
        check_index(index)
        be = backend_for(model)
        if sae.backend is not be:
            fail("splice", "sae", f"an SAE on the model's framework ({be.name}): sae.to(like=model)", f"an SAE on {sae.backend.name}")
        if sae.is_transcoder and output_site is None:
            output_site = sae.hook_name_out  # SAELens's config may name it
            if output_site is None:
                fail("splice", "output_site", "the site a transcoder writes (it reads site=)", output_site)
        if output_site is not None and not sae.is_transcoder:
            fail("splice", "output_site", "None for an SAE (only a transcoder writes another site)", output_site)
        if site is None:
            if not sae.hook_name:
                fail("splice", "site", "a site (the SAE's config names no hook_name)", site)
            site = sae.hook_name
        sites = select(model, site)
        if len(sites) != 1:
            fail("splice", "site", "one site (a layer name, an operation site or a standard name)", sites.names)
        site_name = sites.names[0]
        self._model = weakref.ref(model)
        self._be, self._index = be, index
        self.sae, self.site, self.error_term = sae, site_name, error_term
        self.layer = sae.ops.identity_layer()
        self._pending: list[tuple[Any, Any, Any, Any]] = []  # transcoder: (x, features, clean, state) per call of site
        self.features: FeaturesSpec
        self.features, remove = add_spliced(model, name or f"{site_name}.sae", self.layer)
        self.add(Handle(remove))
        try:
            self.add(attach(model, sites, "forward", self._on_site, INTERVENTION))
            if output_site is not None:
                outs = select(model, output_site)
                if len(outs) != 1:
                    fail("splice", "output_site", "one site", outs.names)
                self.output_site = outs.names[0]
                self.add(attach(model, outs, "forward", self._on_output, INTERVENTION))
        except BaseException:
            self.remove()
            raise

    @property
    def model_ref(self) -> Any:
        model = self._model()
        if model is None:
            raise InvalidArgument("splice(): the model of this splice no longer exists")
        return model

    # -- at each call -----------------------------------------------------------------------------
    def _encode(self, t: Any, ev: Event) -> tuple[Any, Any, Any]:
        width = t.shape[-1] if not self.sae.reshape_hook_z else int(np.prod(t.shape[-2:]))
        if width != self.sae.d_in:
            raise InvalidArgument(
                f"splice(): the SAE's d_in={self.sae.d_in} does not match {self.site!r}'s activation (shape {list(t.shape)}, width {width}); "
                f"splice it at a site of width {self.sae.d_in}{f' (its hook_name is {self.sae.hook_name!r})' if self.sae.hook_name else ''}"
            )
        clean, state = self.sae._encode(t)
        feats = self.layer(clean)  # the features' site: the router's hooks on it run here
        return clean, feats, state

    def _on_site(self, ev: Event) -> Any:
        return apply_to(self._be, ev, self._index, self._site_tensor, "splice")

    def _site_tensor(self, t: Any, pos: int, ev: Event) -> Any:
        clean, feats, state = self._encode(t, ev)
        if self.sae.is_transcoder:
            if len(self._pending) >= 64:  # an output site that never ran for these: keep memory bounded
                del self._pending[0]
            self._pending.append((t, feats, clean, state))
            return t
        if self.error_term:
            return self.sae.features_to_output(t, feats, clean, state)
        return self._be.cast(self.sae._decode(feats, state), self._be.dtype_name(t))

    def _on_output(self, ev: Event) -> Any:
        if not self._pending:
            return None
        x, feats, clean, state = self._pending.pop(0)
        sae, be = self.sae, self._be

        def write(out: Any, pos: int, ev: Event) -> Any:
            if tuple(out.shape[-1:]) != (sae.d_out,):
                raise InvalidArgument(
                    f"splice(): the transcoder's d_out={sae.d_out} does not match {self.output_site!r}'s output (shape {list(out.shape)})"
                )
            if self.error_term:
                return sae.features_to_output(out, feats, clean, state)
            new = sae._decode(feats, state)
            if sae._W_skip_T is not None:
                new = new + be.cast(x, sae.dtype) @ sae._W_skip_T
            return be.cast(new, be.dtype_name(out))

        return apply_to(be, ev, self._index, write, "splice")

    # -- verbs on features by index ------------------------------------------------------------------
    def _vector(self, features: int | Sequence[int], values: Any) -> np.ndarray:
        idx = [features] if isinstance(features, (int, np.integer)) else list(features)
        for f in idx:
            if not isinstance(f, (int, np.integer)) or isinstance(f, bool) or not 0 <= f < self.sae.d_sae:
                fail("steer_features", "features", f"feature indices in 0..{self.sae.d_sae - 1}", features)
        vec = np.zeros(self.sae.d_sae, dtype=np.float32)
        vec[idx] = values
        return vec

    def steer_features(self, features: int | Sequence[int], by: float | Sequence[float], **kw: Any) -> Edits:
        """Add ``by`` to feature(s) ``features`` at every position; with the error term the site's output
        moves by ``by * W_dec[f]``. Returns the handle (``remove()`` or a ``with`` block undoes it).

        ``features``: a feature index or a list of them, each in ``0..d_sae - 1``.
        ``by``: the amount added, one number for all or one per feature.
        ``kw``: the keywords of ``hookkit.steer`` that choose where: ``positions=``, ``steps=``,
        ``calls=`` and ``token_dim=``.

        >>> with sp.steer_features(123, by=8.0):   # doctest: +SKIP
        ...     model(ids)
        """
        with entered("steer_features"):
            return steer(self.model_ref, self.features, self._vector(features, by), **kw)

    def ablate_features(self, features: int | Sequence[int], **kw: Any) -> Edits:
        """Set feature(s) ``features`` to zero; with the error term the site's output loses their
        decoder directions. Returns the handle (``remove()`` or a ``with`` block undoes it).

        ``features``: a feature index or a list of them, each in ``0..d_sae - 1``.
        ``kw``: the keywords of ``hookkit.ablate`` that choose where: ``positions=``, ``steps=``,
        ``calls=`` and ``token_dim=``.

        >>> with sp.ablate_features([5, 9]):   # doctest: +SKIP
        ...     model(ids)
        """
        keep = 1.0 - self._vector(features, 1.0)
        conv: dict[tuple[str, str], Any] = {}
        be = self._be

        def zero(t: Any, ev: Event) -> Any:
            key = (be.device_of(t), be.dtype_name(t))
            m = conv.get(key)
            if m is None:
                m = conv[key] = be.cast(be.to(be.from_numpy(keep), be.device_of(t)), be.dtype_name(t))
            return t * m

        with entered("ablate_features"):
            return edit(self.model_ref, self.features, zero, **kw)

    def capture_top(self, top_k: int) -> TopFeatures:
        """Record the ``top_k`` largest feature activations and their indices at each call (instead
        of the dense ``[..., d_sae]`` that ``hookkit.capture(model, sp.features)`` keeps).

        ``top_k``: how many of each row's features to keep, an int in ``1..d_sae``.

        >>> with sp.capture_top(8) as top:   # doctest: +SKIP
        ...     model(ids)
        >>> values, indices = top.records[0]
        """
        return TopFeatures(self, top_k)

    def feature_stats(self) -> FeatureStats:
        """Count how often each feature fires while open: ``frequency()``, ``dead()``.

        >>> with sp.feature_stats() as fs:   # doctest: +SKIP
        ...     for ids in batches: model(ids)
        >>> fs.dead()
        """
        return FeatureStats(self)


class FeatureStats(HandleGroup):
    """What ``Splice.feature_stats`` returns: how often each feature fires (activation > 0) over the
    forwards while it is open, counted on the device: ``frequency()`` ``[d_sae]`` (fraction of
    tokens), ``dead()`` (indices never fired), ``tokens`` (rows seen)."""

    def __init__(self, sp: Splice):
        super().__init__()
        self.ops, self.be, self.d_sae = sp.sae.ops, sp.sae.backend, sp.sae.d_sae
        self._counts: Any = None
        self.tokens = 0
        self.add(attach(sp.model_ref, select(sp.model_ref, sp.features), "forward", self._on, OBSERVER))

    def _on(self, ev: Event) -> None:
        f = self.be.detach(ev.output).reshape([-1, self.d_sae])
        fired = self.ops.sum_first(self.ops.greater(f, 0.0))
        self._counts = fired if self._counts is None else self._counts + fired
        self.tokens += int(f.shape[0])

    def frequency(self) -> np.ndarray:
        """The fraction of tokens on which each feature fired (a host copy, read once)."""
        if self._counts is None:
            return np.zeros(self.d_sae)
        return np.asarray(self.be.to_numpy(self._counts), dtype=np.float64) / max(self.tokens, 1)

    def dead(self) -> np.ndarray:
        """The indices of the features that never fired."""
        return np.flatnonzero(self.frequency() == 0)


class TopFeatures(HandleGroup):
    """What ``Splice.capture_top`` returns: the ``top_k`` largest features at each call of a splice,
    ``records`` [``TopK(values, indices)``] in call order (on the model's device: no host copy per
    call), as ``hookkit.capture(model, sp.features, top_k=k)`` records them."""

    def __init__(self, sp: Splice, top_k: int):
        super().__init__()
        if not isinstance(top_k, int) or isinstance(top_k, bool) or not 0 < top_k <= sp.sae.d_sae:
            fail("capture_top", "top_k", f"an int in 1..{sp.sae.d_sae}", top_k)
        self.k, self._name = top_k, sp.features
        self._cap = self.add(capture(sp.model_ref, sp.features, top_k=top_k))

    @property
    def records(self) -> list[TopK]:
        """``TopK(values, indices)`` of each call, in call order."""
        return [r.output for r in self._cap.calls(self._name)]


def splice(
    model: Layer,
    site: LayerSpec,
    sae: SAE,
    *,
    error_term: bool = True,
    output_site: LayerSpec | None = None,
    name: str | None = None,
    index: int | None = 0,
) -> Splice:
    """Splice ``sae`` into ``model`` at ``site``, its features a site of their own (``sp.features``)
    that every verb takes. Returns a ``Splice`` (``remove()`` or the end of its
    ``with`` block restores the model).

    >>> with hookkit.splice(model, "transformer.h.6", sae) as sp, hookkit.capture(model, sp.features) as cap:   # doctest: +SKIP
    ...     model(ids)
    >>> cap[sp.features]          # [batch, seq, d_sae]

    ``site``: where the SAE reads, a layer name or any spec ``select`` resolves to one site (None: the
    SAE's ``hook_name``).
    ``sae``: a ``hookkit.SAE`` on the model's framework (``sae.to(like=model)`` moves one), whose
    ``d_in`` is the site's width.
    ``error_term``: True (the default) keeps the model's outputs unchanged until a verb changes the
    features, while False replaces the site's activation by the SAE's reconstruction.
    ``output_site``: the site a transcoder writes, while it reads ``site`` (default: its config's
    ``hook_name_out``), None for an SAE.
    ``name``: the name of the features' site (default ``"<site>.sae"``).
    ``index``: which tensor of a nested output the SAE reads and writes (its position among the
    output's tensors, depth first, 0 by default), or None for every one.
    """
    with entered("splice"):
        return Splice(model, site, sae, error_term=error_term, output_site=output_site, name=name, index=index)
