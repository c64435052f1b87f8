#!/bin/bash
# The fourth session's one device call (2026-11-27), run from the project root: OUT=/tmp/o bash benchmarks/gpu_session_2026-11-27.sh
#
# Two things at once on the GPU machine, on separate cores so neither slows the other's figures:
#   cores 0-3:  benchmarks/gpu_check.sh steps 1 (the CUDA tests) and 6 (the single controller on the GPU,
#               colocated, against the in-process loop: overhead and each pair's metrics compared);
#   cores 4-15: the hacking study's confirmatory batch (issue 46), pre-registered in
#               benchmarks/hacking_confirm_2026-11-27.json before it ran: PPO against the repetition-blind
#               proxy of the pilot (.hack45/: its prompts, pairs, proxy and accuracy, copied from the pilot's
#               folder), fresh seeds 10-21, 60 phases, on the CPU (--device cpu, one thread, 12 at a time).
# Every unit's metrics come back under $OUT/hack/ (its checkpoints do not: they are too large to carry back).
set -u
OUT=${OUT:?set OUT to the folder for the results}; mkdir -p "$OUT"
python3 benchmarks/provenance.py > "$OUT/provenance.txt" 2>&1  # the commit that runs, and whether the tree differs
HK=/tmp/hack_confirm; SEEDS=10,11,12,13,14,15,16,17,18,19,20,21
# the environment as gpu_check.sh makes it (it installs once; its own call below finds /tmp/site ready)
mkdir -p /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >"$OUT/install.txt" 2>&1
tar -xJf .extra/ray-site.tar.xz -C /tmp/site >>"$OUT/install.txt" 2>&1 && touch /tmp/site/.installed
export PYTHONPATH=/tmp/site:$PWD:$PWD/.extra HF_HUB_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
( timeout -s INT "${HACK_S:-450}" taskset -c 4-15 python3 -m rlhf_scratch.studies.hacking --out $HK --proxies .hack45 \
    --raters repetition --algos ppo --seeds $SEEDS --total-phases 60 --eval-every 3 --peak-phases ppo:24 \
    --threads 1 --device cpu --jobs 12 >"$OUT/hack.log" 2>&1; echo "hacking study rc=$?" >>"$OUT/hack.log" ) &
OUT=$OUT STEPS=1,6 BUDGET=${CHECK_S:-430} taskset -c 0-3 bash benchmarks/gpu_check.sh
wait
for run in $HK/runs/*/; do mkdir -p "$OUT/hack/runs/$(basename $run)"
  cp "$run"/{metrics.jsonl,study_start.json,status.json,config.json} "$OUT/hack/runs/$(basename $run)/" 2>/dev/null; done
cp $HK/*.json $HK/*.md $HK/*.png $HK/*.html "$OUT/hack/" 2>/dev/null
tail -3 "$OUT/hack.log"; ls $HK/runs | wc -l
