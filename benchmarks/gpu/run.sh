#!/usr/bin/env bash
# hookkit on one GPU, one command, one results file, at most 8 minutes:
#   1. the quick test lane on CUDA (HOOKKIT_TEST_DEVICE=cuda, tests/conftest.py);
#   2. the host-sync detector (tests/test_sync_guard.py) with torch.cuda.set_sync_debug_mode("error");
#   3. the GPU rows (benchmarks/gpu/on_device.py): statistics on a GPT-2 training step, capture of every
#      block, generate() with capture, CAM vs pytorch-grad-cam, run_with_cache vs TransformerLens's bridge,
#      attribution vs captum, TorchLens and nnsight on the same forward; a row whose peer is not installed says "skipped: not installed".
#
#   bash benchmarks/gpu/run.sh                         # on a GPU machine: benchmarks/gpu/results-<date>.md
#   bash benchmarks/gpu/run.sh --dry-run               # on the CPU, tiny sizes (what CI runs): it starts, runs, writes
#   bash benchmarks/gpu/run.sh --out FILE              # the results file ($OUT/gpu-results.md when OUT is set)
#   PYTHON=/path/to/venv/bin/python bash benchmarks/gpu/run.sh
#
# Exit status: 0 when every step ran and passed, 1 otherwise (the results file says which).
set -uo pipefail
cd "$(dirname "$0")/../.."

dry=0
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --out) out="$2"; shift ;;
    *) echo "run.sh: unknown argument $1 (expected --dry-run, --out FILE)" >&2; exit 2 ;;
  esac
  shift
done
PY="${PYTHON:-python}"
if [ -z "$out" ]; then
  if [ -n "${OUT:-}" ]; then out="$OUT/gpu-results.md"; else out="benchmarks/gpu/results-$(date -u +%Y%m%d-%H%M).md"; fi
fi
mkdir -p "$(dirname "$out")"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
start=$(date +%s)
status=0

if [ "$dry" -eq 1 ]; then
  device=cpu
  tests_env=()
  lane=(-m "not slow" tests/test_sync_guard.py -k "planted")  # the machinery only: CI runs the lanes themselves
  lane_title="The quick lane (dry run: only the detector's planted reads; CI runs the lanes itself)"
  guard=(tests/test_sync_guard.py -k "capture or statistics")
  rows=(--device cpu --tiny --timeout 60)
else
  device=cuda
  if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "run.sh: torch.cuda.is_available() is False: run it on a GPU machine, or --dry-run" >&2
    exit 2
  fi
  tests_env=(HOOKKIT_TEST_DEVICE=cuda)
  lane=(-m "not slow" -n 4)
  lane_title="The quick lane on CUDA"
  guard=(tests/test_sync_guard.py)
  rows=(--device cuda --timeout 48)
fi

{
  echo "# hookkit on the $device: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "\`bash benchmarks/gpu/run.sh$([ "$dry" -eq 1 ] && echo ' --dry-run')\` at $(git rev-parse --short HEAD 2>/dev/null || echo 'an unknown commit')"
  [ "$device" = cuda ] && "$PY" -c "import torch; print(f'{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}, torch {torch.__version__}')"
} >>"$out"

step() {  # step TITLE TIMEOUT COMMAND...: run, append its tail to the results file
  local title="$1" limit="$2"
  shift 2
  local t0 log code
  t0=$(date +%s)
  log=$(mktemp)
  timeout "$limit" "$@" >"$log" 2>&1
  code=$?
  {
    echo
    echo "## $title"
    echo
    echo "\`$*\`: exit $code, $(( $(date +%s) - t0 )) s"
    echo
    echo '```'
    tail -n 25 "$log"
    echo '```'
  } >>"$out"
  rm -f "$log"
  echo "$title: exit $code"
  [ "$code" -eq 0 ] || status=1
}

step "$lane_title" 115 env "${tests_env[@]}" "$PY" -m pytest -q -p no:cacheprovider -p no:randomly "${lane[@]}"
step "The host-sync detector (set_sync_debug_mode(\"error\") on CUDA)" 60 env "${tests_env[@]}" "$PY" -m pytest -q -p no:cacheprovider -p no:randomly "${guard[@]}"
step "The GPU rows" 300 "$PY" benchmarks/gpu/on_device.py "${rows[@]}" --out "$out"

echo >>"$out"
echo "Total: $(( $(date +%s) - start )) s; exit $status" >>"$out"
echo "results: $out ($(( $(date +%s) - start )) s)"
exit "$status"
