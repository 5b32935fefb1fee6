#!/usr/bin/env bash
# DeltaZip's quality protocol on real text nobody here wrote: a `small`-preset
# base pre-trained on the King James Bible, fine-tuned on German fortunes (a
# large gain: a new language), on English fortunes (the same language, a new
# style) and lightly on the same English fortunes (10 steps: a small gain,
# under 0.3 nats, the hard case); every 20th verse and every 10th fortune line are
# held out, and the first 60 KB of each is scored. Then deltazip_budget.sh on
# each fine-tune: the held-out NLL gap against the fine-tune and the share of
# its gain kept, for uniform forms and for --target-ratio budgets. About an
# hour on one core (training dominates).
#   scripts/bench/deltazip/deltazip_heldout_text.sh WORK_DIR [RATIO...]   default ratios: 8 10 12 16
# Needs the Debian packages bible-kjv, fortunes-de and fortunes-min
# (apt-get install bible-kjv fortunes-de fortunes-min).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$root/build/bin
work=$1
shift
ratios=("$@")
[ $# -gt 0 ] || ratios=(8 10 12 16)
command -v bible >/dev/null && [ -d /usr/share/games/fortunes/de ] && [ -f /usr/share/games/fortunes/fortunes ] || {
  echo "needs bible-kjv, fortunes-de and fortunes-min (apt-get install bible-kjv fortunes-de fortunes-min)" >&2
  exit 2
}
mkdir -p "$work"
cd "$work"
split() {  # split NAME EVERY < TEXT: NAME.txt and NAME-heldout.txt (every EVERY-th line held out)
  awk -v n="$1" -v k="$2" 'NF { if (++i % k == 0) print > (n "-heldout.txt"); else print > (n ".txt") }'
}
[ -s kjv.txt ] || bible -f "gen1:1-rev22:21" | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | split kjv 20
[ -s de.txt ] || find /usr/share/games/fortunes/de -type f ! -name '*.dat' ! -name '*.u8' -print0 | sort -z |
  xargs -0 cat | grep -v '^%$' | split de 10
[ -s en.txt ] || grep -hv '^%$' /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/literature \
  /usr/share/games/fortunes/riddles | split en 10
train() { "$bin/sailor-run" -q train --batch-size 16 --seq-len 128 --threads 1 "$@"; }
[ -d init ] || "$bin/sailor-run" -q init --preset small --seed 1 -o init
[ -d base ] || train --model init --data kjv.txt -o base --steps 1200 --lr 3e-3 --warmup 50
[ -d ft-de ] || train --model base --data de.txt -o ft-de --steps 500 --lr 1e-3 --warmup 20
[ -d ft-en ] || train --model base --data en.txt -o ft-en --steps 300 --lr 5e-4 --warmup 20
[ -d ft-en-light ] || train --model base --data en.txt -o ft-en-light --steps 10 --lr 3e-4 --warmup 5
for ft in de en en-light; do
  lang=${ft%-light}
  # The first 60 KB of the held-out text: ~60 k tokens, 20 s per score on one core.
  head -c 60000 "$lang-heldout.txt" >"$lang-heldout-60k.txt"
  echo "=== fine-tune ft-$ft on $lang fortunes; the first 60 KB of the held-out $lang text"
  "$root/scripts/bench/deltazip/deltazip_budget.sh" base "ft-$ft" "$lang.txt" "$lang-heldout-60k.txt" "${ratios[@]}"
done
