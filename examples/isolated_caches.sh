#!/bin/sh
# isolated_caches.sh — the "semantic KV cache isolation" experiment on the embedded Shakespeare model:
# three clusters of conversation turns -> three separate KV caches (plus one combined cache of all turns);
# one question is then answered from each cache, greedily, and the script prints every cache's size and answer.
# usage: sh examples/isolated_caches.sh [path/to/genparity]      (run `make` first)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
G=${1:-$here/build/genparity}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# three topic clusters, one turn per line
cat > "$work/love.txt" <<'T'
ROMEO: But soft, what light through yonder window breaks?
JULIET: O Romeo, Romeo, wherefore art thou Romeo?
ROMEO: With love's light wings did I o'erperch these walls.
T
cat > "$work/war.txt" <<'T'
KING RICHARD III: Now is the winter of our discontent made glorious summer.
RICHMOND: Fellows in arms, and my most loving friends, march on.
KING RICHARD III: A horse! a horse! my kingdom for a horse!
T
cat > "$work/city.txt" <<'T'
First Citizen: Before we proceed any further, hear me speak.
Second Citizen: Speak, speak. We are all resolved rather to die than to famish.
First Citizen: You know Caius Marcius is chief enemy to the people.
T
cat "$work/love.txt" "$work/war.txt" "$work/city.txt" > "$work/all.txt"

question="MENENIUS: What say you now?"
for c in love war city all; do
    "$G" cache build --turns "$work/$c.txt" -o "$work/$c.safetensors" 2>/dev/null
done
for c in love war city all; do
    turns=$(cat "$work/$c.txt")
    prompt=$(printf '%s\n%s\n' "$turns" "$question")
    n=$("$G" cache inspect "$work/$c.safetensors" | awk '$1 == "n_past" {print $2}')
    bytes=$("$G" cache inspect "$work/$c.safetensors" | awk '$1 == "kv_cache_bytes" {print $2}')
    echo "== cache '$c': $n tokens, $bytes bytes of KV cache"
    "$G" generate --prompt "$prompt" --prompt-cache "$work/$c.safetensors" --max-tokens 40 --temp 0
done
