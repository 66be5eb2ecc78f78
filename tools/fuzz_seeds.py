#!/usr/bin/env python3
"""fuzz_seeds.py — writes the seed corpora of the libFuzzer targets (fuzz/fuzz_<name>.c) from the fixtures and the
embedded model: small safetensors files (a few real tensors each), .npy / raw vectors, every config.json and
generation_config.json, the fixtures' chat templates with the reference conversations, tokenizer.json files cut to a
few hundred ids (normalizers, pre-tokenizers, decoders and
post-processors kept), text for encode, id streams for the detokenizer, real KV-cache files (made with the
genparity CLI when build/genparity exists) and context-operation scripts.  Seeds are generated, never committed.

usage: fuzz_seeds.py --out build-fuzz/seeds [--fixtures ../shared/fixtures] [--bin build/genparity]
Standard library only."""
import argparse
import glob
import json
import os
import random
import struct
import subprocess


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def st_read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        return header, base


def st_bytes(tensors, meta=None):
    """tensors: list of (name, dtype, shape, bytes) -> safetensors file bytes"""
    h, off, blobs = {}, 0, []
    if meta:
        h["__metadata__"] = meta
    for name, dt, shape, b in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hj = json.dumps(h, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    return struct.pack("<Q", len(hj)) + hj + b"".join(blobs)


def small_tensors(path, limit=4, max_bytes=4096):
    header, base = st_read(path)
    items = [(k, v) for k, v in header.items() if k != "__metadata__"]
    items.sort(key=lambda kv: kv[1]["data_offsets"][1] - kv[1]["data_offsets"][0])
    out = []
    with open(path, "rb") as f:
        for k, v in items[:limit]:
            a, b = v["data_offsets"]
            if b - a > max_bytes:
                continue
            f.seek(base + a)
            out.append((k, v["dtype"], v["shape"], f.read(b - a)))
    return out, header.get("__metadata__")


def npy_bytes(values, version=1, f8=False, pad_to=0):
    descr = "<f8" if f8 else "<f4"
    hdr = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (descr, len(values))
    pre = 10 if version == 1 else 12
    total = max(pad_to, pre + len(hdr) + 1)
    total += -total % 64
    hdr = hdr + " " * (total - pre - len(hdr) - 1) + "\n"
    lenb = struct.pack("<H", len(hdr)) if version == 1 else struct.pack("<I", len(hdr))
    data = struct.pack("<%d%s" % (len(values), "d" if f8 else "f"), *values)
    return b"\x93NUMPY" + bytes([version, 0]) + lenb + hdr.encode() + data


def cut_tokenizer(path, keep=300):
    with open(path, encoding="utf-8") as f:
        t = json.load(f)
    m = t.get("model", {})
    vocab = m.get("vocab")
    if isinstance(vocab, dict):
        kept = {k: v for k, v in vocab.items() if v < keep}
        m["vocab"] = kept
        merges = m.get("merges") or []
        out = []
        for e in merges:
            a, b = e.split(" ", 1) if isinstance(e, str) else e
            if a in kept and b in kept and a + b in kept:
                out.append(e)
        m["merges"] = out
    return json.dumps(t, ensure_ascii=False).encode("utf-8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--fixtures", default="../shared/fixtures")
    ap.add_argument("--bin", default="build/genparity")
    a = ap.parse_args()
    rnd = random.Random(17)
    models = sorted(glob.glob(os.path.join(a.fixtures, "models", "*"))) + ["models/shakespeare-llama"]
    toks = sorted(glob.glob(os.path.join(a.fixtures, "tokenizers", "*")))

    # safetensors: a few of the smallest real tensors of every model and reference file, with their metadata
    for mdir in models:
        name = os.path.basename(mdir)
        for fn in glob.glob(os.path.join(mdir, "*.safetensors")) + glob.glob(os.path.join(mdir, "*", "*.safetensors")):
            ts, meta = small_tensors(fn)
            if ts:
                write(a.out, "safetensors", "%s-%s" % (name, os.path.basename(fn)), st_bytes(ts, meta))
        for k in ("config.json", "generation_config.json"):
            p = os.path.join(mdir, k)
            if os.path.exists(p):
                with open(p, "rb") as f:
                    write(a.out, "config" if k == "config.json" else "gen_config", name + "-" + k, f.read())

    # steering vectors: a real norm weight as .npy v1 / v2 (long header) / f8, and raw float32 ('R' + floats)
    ts, _ = small_tensors("models/shakespeare-llama/model.safetensors", limit=1, max_bytes=1 << 16)
    vals = [rnd.uniform(-2, 2) for _ in range(64)]
    write(a.out, "npy", "v1.npy", npy_bytes(vals))
    write(a.out, "npy", "v2-long.npy", npy_bytes(vals, version=2, pad_to=2048))
    write(a.out, "npy", "v1-f8.npy", npy_bytes(vals, f8=True))
    write(a.out, "npy", "raw.f32", b"R" + struct.pack("<63f", *vals[:63]))

    # tokenizers cut to a few hundred ids, with everything else kept
    for tdir in toks + [os.path.join(m, "") for m in models]:
        p = os.path.join(tdir, "tokenizer.json")
        if os.path.exists(p):
            write(a.out, "tokenizer", os.path.basename(os.path.normpath(tdir)) + ".json", cut_tokenizer(p))

    # text to encode: the selector byte picks the tokenizer (see fuzz_encode.c)
    corpus = os.path.join(a.fixtures, "corpus", "tinyshakespeare.txt")
    text = open(corpus, "rb").read()[:20000] if os.path.exists(corpus) else b"To be, or not to be"
    samples = [text[i:i + 300] for i in range(0, len(text), 2500)][:8]
    samples.append("Hello, world! \u041f\u0440\u0438\u0432\u0435\u0442 \u4f60\u597d \U0001F44B caf\u00e9".encode())
    samples.append(b"  \t\n 12345 x\xe3\x81 \xff <s></s><|endoftext|>")
    for i, s in enumerate(samples):
        for sel in range(4):
            write(a.out, "encode", "t%d-%d" % (i, sel), bytes([sel]) + s)

    # id streams for the detokenizer: runs of small ids (byte tokens, specials) and random ids
    for sel in range(10):
        for k in range(4):
            ids = [rnd.randrange(0, 600) if k % 2 else rnd.randrange(0, 1 << 15) for _ in range(24)]
            write(a.out, "detok", "d%d-%d" % (sel, k),
                  bytes([sel]) + b"".join(struct.pack("<H", (x << 1) | (k % 2)) for x in ids))

    # context operations: kind byte, then op bytes with operands (see fuzz_ctx_ops.c)
    for kind in (0, 1, 2, 3, 0x40, 0x42, 0x45):
        ops = bytes([0, 5, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 2, 3, 4, 0x0c, 5, 0x0d, 0, 3, 9, 1, 10, 1, 11, 1,
                     3, 2, 7, 0, 2, 1, 0, 2, 0, 3, 0, 4, 0])
        write(a.out, "ctx_ops", "k%02x" % kind, bytes([kind]) + ops)

    # chat templates: every fixture tokenizer_config.json's template, "TEMPLATE\0MESSAGES" with the reference's
    # conversations (as JSON) and alone
    convs = []
    ref = os.path.join(a.fixtures, "references", "chat_templates.json")
    if os.path.exists(ref):
        import ast
        for cases in json.load(open(ref, encoding="utf-8")).values():
            for c in cases[:6]:
                try:
                    m = c["messages"]
                    convs.append(json.dumps(ast.literal_eval(m) if isinstance(m, str) else m))
                except (ValueError, SyntaxError, KeyError, TypeError):
                    pass
    for cfg in sorted(glob.glob(os.path.join(a.fixtures, "*", "*", "tokenizer_config.json"))):
        tpl = json.load(open(cfg, encoding="utf-8")).get("chat_template")
        if isinstance(tpl, list):
            tpl = tpl[0].get("template") if tpl and isinstance(tpl[0], dict) else None
        if not isinstance(tpl, str):
            continue
        tag = os.path.basename(os.path.dirname(cfg))
        write(a.out, "chat_template", tag, tpl.encode("utf-8"))
        for i, m in enumerate(convs[:4]):
            write(a.out, "chat_template", "%s-%d" % (tag, i), tpl.encode("utf-8") + b"\0" + m.encode("utf-8"))

    # OpenAI request bodies for the server's parser: first byte 0 = /v1/completions, 1 = /v1/chat/completions
    bodies = [
        (0, {"model": "m", "prompt": "ROMEO:", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "stop": ["\n"]}),
        (0, {"prompt": [1, 450, 1058], "max_tokens": 4, "logprobs": 2, "seed": 3, "logit_bias": {"13": -100}}),
        (0, {"prompt": "x", "stream": True, "stream_options": {"include_usage": True}, "n": 1, "echo": False}),
        (1, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "frequency_penalty": 0.5,
             "presence_penalty": 0.2, "logprobs": True, "top_logprobs": 3}),
        (1, {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text",
             "text": "t"}]}], "stop": "END", "max_completion_tokens": 3}),
    ]
    for i, (kind, b) in enumerate(bodies):
        write(a.out, "oai_request", "r%d" % i, bytes([kind]) + json.dumps(b).encode())

    # KV-cache files from the CLI (float32, 8-bit quantized, rotating)
    if os.path.exists(a.bin):
        for tag, extra in (("f32", []), ("q8", ["--kv-bits", "8"]), ("rot", ["--max-kv-size", "16"])):
            out = os.path.join(a.out, "cache_file", "cache-%s.safetensors" % tag)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            subprocess.run([a.bin, "cache", "build", "--model", "models/shakespeare-llama", "--prompt",
                            "ROMEO: But soft, what light", "-o", out, "--threads", "1"] + extra,
                           check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    n = sum(len(fs) for _, _, fs in os.walk(a.out))
    print("fuzz_seeds: %d seed files under %s" % (n, a.out))


if __name__ == "__main__":
    main()
