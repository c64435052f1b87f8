#!/bin/bash
# The one-call GPU check (issue 45): run from the project root on a GPU machine; results go to $OUT.
#
#   OUT=/tmp/gpu_out bash benchmarks/gpu_check.sh                 # on a GPU machine (≤ ~8 min)
#   OUT=/tmp/gpu_out DEVICE=cpu bash benchmarks/gpu_check.sh      # the same steps, tiny and short, on a CPU
#
# Exit 0 only when every step that ran passed; 1 when a step failed or timed out (the last line names
# them), 2 without OUT, 3 when the package does not import, 4 on a machine without a CUDA GPU (nothing
# run: DEVICE=cpu is the CPU mode). Everything is written under $OUT (the default run's folder too,
# removed once its metrics are copied), but the wheels a GPU machine installs (/tmp/site, kept for a
# second call) and Ray's session logs of step 6 (/tmp/ray, Ray's own place).
#
# What it runs, in order of importance, each step under its own timeout and the whole under
# BUDGET seconds (a step that would start past it is skipped, said in the log):
#   1. the CUDA tests (pytest -m cuda): the CUDA-graph decode step, the fast forward on the GPU
#   2. benchmarks/gpu_speed.py at GPT-2 small's shape: bf16/fp32 matmul peak, the learning step's
#      utilisation at batch 64 and 512 (fp32, bf16), decoding tokens/s with and without the CUDA
#      graph, a PPO round at batch 64 (fp32, bf16)
#   3. the tiny preset beside TRL 1.16 (benchmarks/bench_trl.py, one process per system: each
#      costs ~25 s of imports there, so one repeat)
#   4. the default PPO run (100 phases, CUDA graph on by default): its last-10 mean reward
#   5. with what time is left: torch.compile of the learning forward at GPT-2 small's shape, batch 512, its default mode and reduce-overhead
#   6. the single controller on one GPU, colocated (issue 44): benchmarks/controller_overhead.py, 1 rank,
#      `--controller ray` against the in-process loop, A B A B, each pair's metrics compared (equivalence)
#
# The GPU machines have torch, transformers, accelerate, pandas, pyarrow, jaxtyping, einops, pytest,
# pytest-xdist, pytest-timeout, matplotlib, tabulate and tqdm, but not the rest: they travel as
# wheels in .whl/ and vaderSentiment (no wheel) as a package folder in .extra/, made beforehand in
# the project root on a machine with the registry (name both in the device tool's `carry`):
#   echo /.whl/ >> .git/info/exclude; echo /.extra/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl transformer_lens==3.9.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 fancy-einsum==0.0.3 \
#     better-abc==0.0.3 eindex-callum==0.1.2 tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1 \
#     beartype==0.23.1 trl==1.16.0 msgpack==1.2.4 protobuf==7.36.2 jsonschema==4.26.0 \
#     jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==0.30.0 attrs==26.1.0 click==8.5.1
# and Ray (for step 6), whose 76 MB wheel is over the carry's 64 MiB: unpacked, its Java jar and source maps
# removed, as .extra/ray-site.tar.xz (31 MB):
#   python3 -m pip download --no-deps --only-binary=:all: ... -d /tmp/raywhl ray==2.60.0
#   mkdir /tmp/ray-site && cd /tmp/ray-site && unzip -q /tmp/raywhl/ray-*.whl && rm -rf ray/jars ray/dashboard/client/build/static/js/*.map
#   tar -cf - -C /tmp/ray-site . | xz -T2 -6 > $PROJECT/.extra/ray-site.tar.xz
#   mkdir -p .extra && cp -r "$(python -c 'import vaderSentiment,os;print(os.path.dirname(vaderSentiment.__file__))')" .extra/
set -u
[ -n "${OUT:-}" ] || { echo "gpu_check: OUT=FOLDER is required, the folder for the results (OUT=/tmp/gpu_out bash benchmarks/gpu_check.sh)" >&2; exit 2; }
DEVICE=${DEVICE:-cuda}
BUDGET=${BUDGET:-540}
STEPS=${STEPS:-1,2,3,4,5,6}   # which of the steps below to run (a shorter check: STEPS=1,2,3 BUDGET=300)
mkdir -p "$OUT"
L=$OUT/log.txt; T0=$(date +%s)
say(){ echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$L"; }
left(){ echo $(( BUDGET - ($(date +%s) - T0) )); }
# run NAME TIMEOUT CMD...: the step if at least TIMEOUT/2 seconds are left, under min(TIMEOUT, what is left)
run(){ local name=$1 t=$2; shift 2; local l; l=$(left)
  case ",$STEPS," in *",${name%%.*},"*) ;; *) return ;; esac
  if [ "$l" -lt $(( t / 2 )) ]; then say "SKIP $name: ${l}s left of the budget"; return; fi
  [ "$l" -lt "$t" ] && t=$l
  say "$name (timeout ${t}s)"; timeout "$t" "$@" >>"$L" 2>&1; local rc=$?; say "$name rc=$rc"
  [ "$rc" -eq 0 ] || FAILED="$FAILED, $name$([ "$rc" -eq 124 ] && echo " (timed out)")"; }
FAILED=""

if [ "$DEVICE" != cpu ]; then  # before anything is installed: a machine without a GPU runs nothing
  why=$(python3 -c "import torch; print('' if torch.cuda.is_available() else f'torch {torch.__version__} sees no CUDA device')" 2>&1 | tail -1)
  [ -z "$why" ] || { echo "gpu_check: no GPU here ($why): nothing was run; DEVICE=cpu runs the same steps, tiny, on the CPU" | tee -a "$L" >&2; exit 4; }
fi

if [ -d .whl ] && [ "$DEVICE" != cpu ]; then
  mkdir -p /tmp/site; [ -f /tmp/site/.installed ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >>"$L" 2>&1 || say "pip failed"
  [ ! -f /tmp/site/.installed ] && [ -f .extra/ray-site.tar.xz ] && { tar -xJf .extra/ray-site.tar.xz -C /tmp/site >>"$L" 2>&1 || say "ray unpack failed"; }
  touch /tmp/site/.installed  # a second call on the same machine (gpu_session_*.sh) installs nothing again
  export PYTHONPATH=/tmp/site:$PWD:$PWD/.extra
fi
export HF_HUB_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
nvidia-smi -L >>"$L" 2>&1
python3 -c "import torch, transformer_lens, rlhf_scratch; print('torch', torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')" >>"$L" 2>&1 \
  || { say "IMPORT FAILED"; tail -30 "$L"; exit 3; }
# the commit that runs and whether the tree differs from it (benchmarks/provenance.py: the device's copy of
# the tree can carry an older .git, so a bare `git log -1` named e42f022 for the H200 runs of 6573376 / 7c2efa5)
python3 benchmarks/provenance.py | sed 's/^/checkout /' >>"$L" 2>&1

if [ "$DEVICE" = cpu ]; then SHAPE=tiny; QUICK=--quick; SYSTEMS=ours-ppo; ROUNDS=1; PHASES=3
else SHAPE=gpt2-small; QUICK=; SYSTEMS=ours-ppo,ours-rloo,ours-grpo,trl-rloo,trl-grpo; ROUNDS=4; PHASES=100; fi

run "1. cuda tests" 80 python3 -m pytest -p no:cacheprovider -o addopts="" -q -m cuda -rA \
  tests/integration/test_generation.py tests/integration/test_fast_forward.py
run "2. gpu_speed ($SHAPE)" 100 python3 benchmarks/gpu_speed.py --device "$DEVICE" --shape "$SHAPE" $QUICK \
  --sections peak,learn,decode,round --json "$OUT/gpu_speed.json"
run "3. beside TRL, tiny preset" 150 python3 benchmarks/bench_trl.py --device "$DEVICE" --threads 0 --repeats 1 \
  --rounds $ROUNDS --systems $SYSTEMS --json "$OUT/bench_tiny.json"
RUN=$OUT/default_run  # inside OUT; its checkpoints are removed once the metrics are copied
run "4. default run" 110 python3 -m rlhf_scratch.train sentiment --device "$DEVICE" --total-phases $PHASES \
  --run-dir "$RUN"
[ -f "$RUN/metrics.jsonl" ] && cp "$RUN/metrics.jsonl" "$OUT/ppo_default.jsonl" && rm -rf "$RUN" &&
{ python3 - "$OUT/ppo_default.jsonl" >>"$L" 2>&1 || FAILED="$FAILED, 4. the default run's summary"; } <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
last = rows[-10:]
print(f"default run: {len(rows)} phases, mean reward of the last {len(last)}: {sum(r['rewards/mean'] for r in last) / len(last):.3f}, "
      f"phase time median {sorted(r['charts/phase_time'] for r in rows)[len(rows) // 2]:.3f} s")
EOF
[ "$DEVICE" != cpu ] && run "5. torch.compile, learning step (default and reduce-overhead)" 170 python3 benchmarks/gpu_speed.py --device "$DEVICE" \
  --shape "$SHAPE" --sections learn-compile --json "$OUT/gpu_speed_compile.json"
run "6. single controller, one device" 300 python3 benchmarks/controller_overhead.py --device "$DEVICE" --ranks 1 \
  --repeats 3 --phases $(( PHASES < 10 ? 3 : 10 )) --serialisation-reps 0 --out "$OUT/controller_overhead.json"
grep -E "default run:|TFLOP|tokens_per_s|rc=|SKIP|passed|failed|×|ratio" "$L" | tail -60
[ -z "$FAILED" ] || { say "FAILED: ${FAILED#, }"; exit 1; }
say "done: every step that ran passed"
