#!/usr/bin/env bash
# Build the benchmark environment from scratch: hookkit plus its peers (fastai, TorchLens,
# torchinfo, pytorch-grad-cam, transformers, paddlepaddle). The peers are NEVER project
# dependencies; they live only here.
#
#   bash benchmarks/setup_env.sh [VENV_DIR]     (default /work/bench-venv)
#
# torch 2.13.0 (CPU) is installed first from the local wheel, and every later install is
# constrained to it: any torch request it does not satisfy would pull a multi-GB CUDA build.
set -euo pipefail
VENV=${1:-/work/bench-venv}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
TORCH_WHEEL=${TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}

python3 -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade pip
if [ -f "$TORCH_WHEEL" ]; then "$PIP" install -q "$TORCH_WHEEL"; else "$PIP" install -q torch==2.13.0; fi

CONSTRAINTS=$(mktemp)
echo "torch==2.13.0" > "$CONSTRAINTS"
"$PIP" install -q -c "$CONSTRAINTS" \
    fastai torchlens torchinfo grad-cam captum transformers "paddlepaddle==3.3.1" numpy
# optional peers of the third wave: each may fail to resolve beside torch 2.13.0; the benchmarks skip what is missing
for peer in nnsight transformer-lens "wandb"; do "$PIP" install -q -c "$CONSTRAINTS" "$peer" || echo "could not install $peer (skipped)"; done
# fourth-wave peers: SAELens, zennit (LRP), torchview (graphs), accelerate (big models), torchao and
# optimum-quanto (CPU quantization); zennit imports torchvision at import time: the benchmarks stub it
for peer in sae-lens zennit torchview accelerate torchao optimum-quanto; do "$PIP" install -q -c "$CONSTRAINTS" "$peer" || echo "could not install $peer (skipped)"; done
# a peer may drag in a torchvision built for another torch: it does not work here, and nothing needs it
"$PIP" uninstall -y -q torchvision 2>/dev/null || true
"$PIP" install -q -c "$CONSTRAINTS" -e "$REPO"
rm -f "$CONSTRAINTS"

# fastai drags in a torchvision built for another torch; it does not work here. The benchmarks
# import only fastai.callback.hook, which does not need it.
"$VENV/bin/python" - <<'PY'
import torch, paddle, transformers, torchlens, hookkit
from fastai.callback.hook import hook_outputs, ActivationStats, Hooks
print("torch", torch.__version__, "| paddle", paddle.__version__, "| transformers", transformers.__version__)
PY
