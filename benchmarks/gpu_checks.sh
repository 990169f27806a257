#!/usr/bin/env bash
# The GPU checks, as one script for a short lease of a CUDA machine: the `gpu` tests on the
# real device, the emulator checked against the real device (gpu_fidelity.py), then the
# training-step benchmark (bench_gpu.py) alone on the GPU so that its timings are clean.
#
#   OUT=/some/dir bash benchmarks/gpu_checks.sh
#
# Needs python3 with a CUDA build of torch, msgpack, click, rich and pytest; no install of
# npusan (PYTHONPATH=src). Each stage has its own time limit and writes its log under $OUT
# as it goes, so a stage that runs out still leaves what the earlier ones found.
set -u
OUT=${OUT:-$(mktemp -d)}
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/gpu_checks.txt"; }

log "machine"
{ nvidia-smi -L; uname -m; $PY -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'; } >>"$OUT/gpu_checks.txt" 2>&1

log "build the compiled core in place (the package works without it, slower)"
timeout 120 $PY setup.py -q build_ext --inplace >>"$OUT/gpu_checks.txt" 2>&1 || log "build failed: the Python engine is used"
$PY -m npusan --version >>"$OUT/gpu_checks.txt" 2>&1

log "gpu tests and the fidelity check, side by side"
timeout 180 $PY -m pytest -q -p no:cacheprovider -m gpu -rs tests/recorder >"$OUT/gpu_tests.txt" 2>&1 &
tests=$!
timeout 180 $PY benchmarks/gpu_fidelity.py --jobs 12 --out "$OUT" >>"$OUT/gpu_checks.txt" 2>&1 &
fid=$!
wait $tests; log "gpu tests rc $? ($(tail -1 "$OUT/gpu_tests.txt"))"
wait $fid; log "fidelity rc $?"

log "bench_gpu (alone on the GPU)"
timeout 250 $PY benchmarks/bench_gpu.py --timeout 70 --modes plain,floor,npusan,npusan-nostack,csan,plain --out "$OUT" >>"$OUT/gpu_checks.txt" 2>&1
log "bench_gpu rc $?"
log "done"
