#!/usr/bin/env python3
"""chat_template_refs.py — the oracle for genparity's chat-template engine.

Renders every template of the corpus (tests/data/templates/*.jinja, plus the chat_template of the fixture
tokenizers' tokenizer_config.json) with every conversation of tests/data/chat_conversations.json through
transformers' render_jinja_template — the function apply_chat_template(tokenize=False) calls, with its sandboxed
Jinja2 environment — and writes the texts (or the error a template raised) to a JSON reference that
tests/parity/test_chat_template_corpus.c compares byte for byte.

  .venv/bin/python tools/chat_template_refs.py                      # rewrites tests/data/chat_template_refs.json
  .venv/bin/python tools/chat_template_refs.py --out /tmp/r.json    # (the live test writes a fresh copy)
  .venv/bin/python tools/chat_template_refs.py --templates DIR ...  # other template folders (*.jinja)

strftime_now is pinned to 2025-01-31 12:00:00 so the output is reproducible (the C side uses --now with the
same instant).  Special tokens: the fixture tokenizers' own; for the .jinja files, the family's tokens below
(passed as kwargs, so both sides see the same values).
"""
import argparse
import datetime as _dt
import glob
import json
import os
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOW = _dt.datetime(2025, 1, 31, 12, 0, 0)
NOW_EPOCH = int(NOW.replace(tzinfo=_dt.timezone.utc).timestamp())


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


ctu.datetime = _FixedDatetime  # strftime_now reads datetime.now() from this module

# bos/eos of each family (the values their tokenizer_config.json carries)
SPECIALS = [
    ("llama-3", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    ("Llama-3", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    ("Qwen", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    ("gemma", {"bos_token": "<bos>", "eos_token": "<eos>"}),
    ("Mistral", {"bos_token": "<s>", "eos_token": "</s>"}),
    ("Phi-3", {"bos_token": "<s>", "eos_token": "<|endoftext|>"}),
    ("DeepSeek-R1-Distill", {"bos_token": "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                             "eos_token": "<\uff5cend\u2581of\u2581sentence\uff5c>"}),
    ("SmolLM3", {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}),
    ("granite", {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>"}),
]


def specials_for(name):
    for key, toks in SPECIALS:
        if key in name:
            return dict(toks)
    return {"bos_token": "<s>", "eos_token": "</s>"}


def corpus(template_dirs, fixtures):
    out = []
    for d in template_dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.jinja"))):
            name = os.path.splitext(os.path.basename(path))[0]
            with open(path, encoding="utf-8") as f:
                out.append((name, os.path.relpath(path, ROOT), f.read(), specials_for(name)))
    for cfg in sorted(glob.glob(os.path.join(fixtures, "tokenizers", "*", "tokenizer_config.json"))):
        with open(cfg, encoding="utf-8") as f:
            c = json.load(f)
        if not isinstance(c.get("chat_template"), str):
            continue
        toks = {}
        for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
            v = c.get(k)
            if isinstance(v, dict):
                v = v.get("content")
            if isinstance(v, str):
                toks[k] = v
        tok = os.path.basename(os.path.dirname(cfg))
        out.append(("fixture-" + tok, "fixtures:tokenizers/%s/tokenizer_config.json" % tok, c["chat_template"], toks))
    return out


def render(template, case, specials):
    kwargs = dict(specials)
    kwargs.update(case.get("kwargs", {}))
    try:
        rendered, _ = ctu.render_jinja_template(
            conversations=[case["messages"]], tools=case.get("tools"), documents=None, chat_template=template,
            add_generation_prompt=case.get("add_generation_prompt", False), **kwargs)
        return {"text": rendered[0]}
    except jinja2.exceptions.TemplateError as e:  # raise_exception and Jinja's own errors
        raised = type(e) is jinja2.exceptions.TemplateError
        return {"error": str(e), "raised": raised}
    except Exception as e:  # a type error inside the template, as Python sees it
        return {"error": "%s: %s" % (type(e).__name__, e), "raised": False}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "chat_template_refs.json"))
    ap.add_argument("--templates", nargs="*", default=[os.path.join(ROOT, "tests", "data", "templates")])
    ap.add_argument("--fixtures", default=os.environ.get("GENPARITY_FIXTURES", os.path.join(ROOT, "..", "shared", "fixtures")))
    ap.add_argument("--conversations", default=os.path.join(ROOT, "tests", "data", "chat_conversations.json"))
    a = ap.parse_args()
    with open(a.conversations, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    results = []
    for name, source, template, specials in corpus(a.templates, a.fixtures):
        for case in cases:
            r = {"template": name, "case": case["name"]}
            r.update(render(template, case, specials))
            results.append(r)
        if not source.startswith("fixtures:"):
            pass
    templates = {name: {"source": source, "specials": specials} for name, source, _, specials in corpus(a.templates, a.fixtures)}
    ref = {"generator": "tools/chat_template_refs.py", "transformers": transformers.__version__,
           "jinja2": jinja2.__version__, "now_epoch": NOW_EPOCH, "templates": templates, "results": results}
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=0, sort_keys=False)
        f.write("\n")
    n_err = sum(1 for r in results if "error" in r)
    print("%s: %d templates x %d conversations = %d renderings (%d errors)" % (a.out, len(templates), len(cases), len(results), n_err))


if __name__ == "__main__":
    sys.exit(main())
