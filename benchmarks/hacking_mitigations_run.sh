#!/usr/bin/env bash
# Issue 46, item 5: the mitigation runs, prepared for ONE device call of at most 7 minutes on the CPU
# cores of a lent 16-core machine (the GPU is not used: --device cpu, one torch thread per run).
#
#   OUT=$OUT bash benchmarks/hacking_mitigations_run.sh          # HACK_S (default 380) caps the studies
#   EXTRA="--seeds 22 --total-phases 1 --eval-every 1" ...        # a smoke test: flags after the run's own win
#
# Needs, carried with the tree (18 MB): .hack45/ (the pilot's prompts, pairs, accuracy.json and three
# proxies: rm-repetition, and rm-repetition-seed2, -seed3 made on the 2-core CPU for the ensemble, 35 MB)
# and the environment's .whl/ (6.6 MB) and .extra/vaderSentiment. Not .extra/ray-site.tar.xz (28 MB):
# no Ray here, and with it the carry passes its 64 MiB. So: carry [".hack45", ".whl", ".extra/vaderSentiment"].
#
# Nine PPO runs at once, seeds 22-24, 60 phases, evaluation every 3, against the repetition-blind proxy:
#   cores 4-6    KL penalty β = 0.05
#   cores 7-9    KL penalty β = 0.2
#   cores 10-12  the reward-model ensemble, k = 3, worst case (min)
#   cores 13-15  with MEAN=1 only: the ensemble's mean (three more runs, no more wall time)
# A run of 60 phases took 263-275 s on one of these cores (the second pre-registered test). An ensemble
# run scores every sample three times: timed on the shared 2-core CPU over 6 phases (3 evaluations),
# its time/reward summed 12.1 s against 4.4 s for a plain run, wall 97 s against 100 s (load ~9, so
# the wall times are noise): about +10-15 % a run, ~300-310 s there. HACK_S = 380 s leaves the call's
# start and the copies inside 7 minutes; a run that does not finish is stopped (Ctrl-C, checkpointed)
# and its metrics come back all the same; `mitigate` then reads the finished runs of a study whose
# report was not written (`mitigate.load_curves`), and the unfinished are reported missing, not rerun.
#
# Afterwards, on the CPU machine, with the folders this brings back:
#   python -m rlhf_scratch.studies.hacking.mitigate --proxies .hack45 --out benchmarks/hacking_mitigations_2026-11-27.json \
#       --overwrite --methods $OUT/mit/beta0.05,$OUT/mit/beta0.2,$OUT/mit/ensemble-min
#   (with MEAN=1, add ,$OUT/mit/ensemble-mean)
set -u
OUT=${OUT:?set OUT to the folder for the results}; mkdir -p "$OUT/mit"
python3 benchmarks/provenance.py > "$OUT/provenance.txt" 2>&1  # the commit that runs, and whether the tree differs
MIT=${MIT:-/tmp/mitigations}
if [ -d .whl ] && [ ! -e /tmp/site/.installed ] && [ ! -e /tmp/site/.wheels ]; then  # as gpu_check.sh makes it
  mkdir -p /tmp/site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >"$OUT/install.txt" 2>&1
  touch /tmp/site/.wheels  # not .installed: Ray is not unpacked (the hacking study needs none; gpu_check.sh would)
fi
export PYTHONPATH=/tmp/site:$PWD:$PWD/.extra HF_HUB_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
COMMON=(--proxies .hack45 --raters repetition --algos ppo --seeds 22,23,24 --total-phases 60 --eval-every 3
        --threads 1 --device cpu --jobs 3)
study() {  # NAME CORES FLAGS...
  local name=$1 cores=$2; shift 2
  ( timeout -s INT "${HACK_S:-380}" taskset -c "$cores" python3 -m rlhf_scratch.studies.hacking --out "$MIT/$name" \
      "${COMMON[@]}" "$@" ${EXTRA:-} >"$OUT/mit/$name.log" 2>&1; echo "$name rc=$?" >>"$OUT/mit/$name.log" ) &
}
study beta0.05 4-6 --beta 0.05
study beta0.2 7-9 --beta 0.2
study ensemble-min 10-12 --mitigation ensemble-min
NAMES="beta0.05 beta0.2 ensemble-min"
if [ "${MEAN:-0}" = 1 ]; then study ensemble-mean 13-15 --mitigation ensemble-mean; NAMES="$NAMES ensemble-mean"; fi
wait
for name in $NAMES; do  # what the table reads (not the checkpoints: too large to carry)
  mkdir -p "$OUT/mit/$name"; cp "$MIT/$name"/*.json "$MIT/$name"/*.md "$MIT/$name"/*.png "$OUT/mit/$name/" 2>/dev/null
  for run in "$MIT/$name"/runs/*/; do mkdir -p "$OUT/mit/$name/runs/$(basename "$run")"
    cp "$run"/{metrics.jsonl,study_start.json,status.json,config.json} "$OUT/mit/$name/runs/$(basename "$run")/" 2>/dev/null; done
  tail -2 "$OUT/mit/$name.log"
done
