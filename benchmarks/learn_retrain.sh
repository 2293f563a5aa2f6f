#!/usr/bin/env bash
# `xmtc learn` against a retrain, as a user runs them (benchmarks/RESULTS.md, "Learning after training"):
# a model of 80% of a training file, given the other 20% with `xmtc learn`, against the model of all of it.
#   bash benchmarks/learn_retrain.sh yso-finna-en OUT_DIR
set -euo pipefail
data="$(cd "$(dirname "$0")/../.." && pwd)/shared/data/$1"
out="$2"
mkdir -p "$out"
t() { local s; s=$(date +%s.%N); "$@" >/dev/null; python -c "print(round($(date +%s.%N) - $s, 1))"; }
xmtc split "$data/train.txt.gz" --valid 0.2 --seed 0 --train-out "$out/train80.tsv.gz" --valid-out "$out/new20.tsv.gz" -q
s80=$(t xmtc train "$out/train80.tsv.gz" -o "$out/m80" -q)
slearn=$(t xmtc learn "$out/m80" "$out/new20.tsv.gz" -o "$out/m80l" -q)
s100=$(t xmtc train "$data/train.txt.gz" -o "$out/m100" -q)
for m in m80:$s80 m80l:$slearn m100:$s100; do
  name=${m%%:*}; secs=${m##*:}
  xmtc evaluate "$out/$name" "$data/test.txt.gz" --json -q | tail -1 |
    python -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'model': '$name', 'wall_s': $secs, **{k: d[k] for k in ('P@1', 'P@5', 'ECE@5')}}))"
done
