#!/bin/bash
# The fourth session's second device call (2026-11-27), from the project root: OUT=/tmp/o bash benchmarks/gpu_session_2026-11-27b.sh
#
#   cores 0-3,13-15 + the GPU: the hacking study's test of a second algorithm, pre-registered in
#       benchmarks/hacking_rloo_2026-11-27.json before it ran: RLOO (lr 5e-4, 90 phases) against the pilot's
#       repetition-blind proxy, seeds 22-33, on CUDA (--device cuda), 12 runs at once;
#   cores 4-12: the mitigation runs (benchmarks/hacking_mitigations_run.sh: PPO with β = 0.05, β = 0.2 and
#       the k = 3 worst-case ensemble, seeds 22-24, on the CPU).
# Carry: .whl, .extra/vaderSentiment, .hack45 (with the ensemble's two extra proxies); no Ray.
# Everything comes back as one tarball (the device tool returns a limited number of files), without checkpoints.
set -u
OUT=${OUT:?set OUT to the folder for the results}; mkdir -p "$OUT"
python3 benchmarks/provenance.py > "$OUT/provenance.txt" 2>&1  # the commit that runs, and whether the tree differs
mkdir -p /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >"$OUT/install.txt" 2>&1
touch /tmp/site/.wheels
export PYTHONPATH=/tmp/site:$PWD:$PWD/.extra HF_HUB_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
nvidia-smi -L >"$OUT/gpu.txt" 2>&1
( timeout -s INT "${HACK_S:-400}" taskset -c 0-3,13-15 python3 -m rlhf_scratch.studies.hacking --out /tmp/rloo --proxies .hack45 \
    --raters repetition --algos rloo --seeds 22,23,24,25,26,27,28,29,30,31,32,33 --total-phases 90 --eval-every 3 \
    --base-lr 5e-4 --threads 1 --device cuda --jobs 12 >"$OUT/rloo.log" 2>&1; echo "rloo study rc=$?" >>"$OUT/rloo.log" ) &
HACK_S=${HACK_S:-400} OUT=/tmp/mitout bash benchmarks/hacking_mitigations_run.sh >"$OUT/mitigations.txt" 2>&1
wait
tar -czf "$OUT/results.tgz" -C /tmp --exclude=checkpoints --exclude=policy.pt --exclude=train.lock rloo mitigations mitout
tail -c 1500 "$OUT/rloo.log" | tr '\r' '\n' | tail -6; tail -8 "$OUT/mitigations.txt"; ls -la "$OUT"
