"""test_python_api.py — the genparity Python package against the parity fixtures: greedy_48 of every fixture model
through genparity.generate_ids (exact, like the C parity test), the steering rows (residual injection, logit-bias
vector), logprobs and hidden states against transformers' tensors (tolerances stated, actual error printed), the
streaming response fields, caller logits processors and samplers, prompt-cache round trip, and errors."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import model_dir, reference
from safetensors.numpy import load_file

import genparity

MODELS = ["tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-gemma2", "tiny-gemma3", "shakespeare-llama"]
_loaded: dict = {}


def load(name: str):
    if name not in _loaded:
        _loaded[name] = genparity.load(str(model_dir(name)))
    return _loaded[name]


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


@pytest.mark.parametrize("name", MODELS)
def test_greedy_48_parity(name):
    model, _ = load(name)
    ref = reference(name)
    for i, p in enumerate(ref["prompts"]):
        got = genparity.generate_ids(model, p["ids"], 48, temperature=0)
        want = p["greedy_48"]
        first = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), None)
        print(f"{name} prompt {i}: {len(got)} tokens, first difference at {first}")
        assert got == want, f"{name} prompt {i}: first difference at {first}"


def test_text_prompt_matches_reference_ids():
    model, tok = load("tiny-llama")
    p = reference("tiny-llama")["prompts"][0]
    assert tok.encode(p["text"]) == p["ids"]
    text = genparity.generate(model, tok, p["text"], max_tokens=48, temperature=0)
    assert text == tok.decode(p["greedy_48"], skip_special_tokens=True)


def test_steering_rows():
    name = "tiny-llama"
    model, _ = load(name)
    ref = reference(name)
    ids = ref["prompts"][0]["ids"]
    vec = load_file(str(model_dir(name) / "reference.safetensors"))["steer.vector"]
    rows = ref["steering"]["residual_injection"]
    for row in rows:
        hook = genparity.SteeringHook(layer=row["layer"], vector=vec, alpha=row["alpha"],
                                      schedule="ramp" if row["ramp_steps"] else "constant", steps=row["ramp_steps"])
        got = genparity.generate_ids(model, ids, 32, temperature=0, steering=[hook])
        print(f"injection layer {row['layer']} alpha {row['alpha']} ramp {row['ramp_steps']}: "
              f"{sum(a == b for a, b in zip(got, row['greedy_32']))}/32 equal")
        assert got == row["greedy_32"]
    for row in ref["steering"]["logit_bias"]:
        got = genparity.generate_ids(model, ids, 32, temperature=0, steering=[], logit_bias_vector=vec,
                                     logit_bias_alpha=row["alpha"])
        assert got == row["greedy_32"], f"logit bias alpha {row['alpha']}"
    # a callable schedule equal to the constant one gives the same tokens
    row = rows[0]
    hook = genparity.SteeringHook(layer=row["layer"], vector=vec, alpha=row["alpha"], schedule=lambda s: row["alpha"])
    hook.alpha = 1.0
    if not row["ramp_steps"]:
        assert genparity.generate_ids(model, ids, 32, temperature=0, steering=[hook]) == row["greedy_32"]
    # steering is replaced per call: no steering again gives greedy_48's start
    plain = genparity.generate_ids(model, ids, 32, temperature=0, steering=[])
    assert plain == ref["prompts"][0]["greedy_48"][:32]


def test_logprobs_and_hidden_states_match_transformers():
    name = "tiny-llama"
    model, tok = load(name)
    ref = reference(name)
    tensors = load_file(str(model_dir(name) / "reference.safetensors"))
    ids = ref["prompts"][0]["ids"]
    first = next(genparity.stream_generate(model, tok, ids, 4, temperature=0))
    assert first.logprobs.shape == (model.n_vocab,) and first.logprobs.dtype == np.float32
    err = float(np.abs(first.logprobs - log_softmax(tensors["prompt0.last_logits"])).max())
    print(f"step-0 logprobs vs log_softmax(transformers' last_logits): max |diff| {err:.3g} (tolerance 1e-3)")
    assert err <= 1e-3
    want = tensors["prompt0.hidden_states"]
    layers = list(range(want.shape[0]))
    hidden = model.hidden_states(ids, layers)
    assert hidden.shape == want.shape
    herr = float(np.abs(hidden - want).max())
    print(f"hidden states vs transformers' output_hidden_states: max |diff| {herr:.3g} (tolerance 1e-3)")
    assert herr <= 1e-3
    logits, _ = model.forward(ids, all_logits=True)
    lerr = float(np.abs(logits - tensors["prompt0.logits"]).max())
    print(f"all-position logits: max |diff| {lerr:.3g} (tolerance 1e-3)")
    assert lerr <= 1e-3


def test_stream_fields_and_text():
    model, tok = load("shakespeare-llama")
    rs = list(genparity.stream_generate(model, tok, "ROMEO:", max_tokens=12, temperature=0, ignore_eos=True))
    assert len(rs) == 12
    assert [r.generation_tokens for r in rs] == list(range(1, 13))
    assert all(r.finish_reason is None for r in rs[:-1]) and rs[-1].finish_reason == "length"
    assert all(r.prompt_tokens == len(tok.encode("ROMEO:")) for r in rs)
    assert rs[-1].prompt_tps > 0 and rs[-1].generation_tps > 0 and rs[-1].peak_memory > 0
    text = "".join(r.text for r in rs)
    assert text == tok.decode([r.token for r in rs], skip_special_tokens=True)
    assert text == genparity.generate(model, tok, "ROMEO:", max_tokens=12, temperature=0, ignore_eos=True)


def test_logits_processor_and_sampler_hooks():
    model, tok = load("shakespeare-llama")
    base = genparity.generate_ids(model, "ROMEO:", 10, temperature=0, ignore_eos=True)
    seen = []

    def ban_first(tokens, logits):
        seen.append(len(tokens))
        logits[base[0]] = -np.inf
        return logits
    got = genparity.generate_ids(model, "ROMEO:", 10, temperature=0, ignore_eos=True, logits_processors=[ban_first])
    assert got[0] != base[0] and base[0] not in got
    n_prompt = len(tok.encode("ROMEO:"))
    assert seen == list(range(n_prompt, n_prompt + 10))  # called once per step with prompt + generated ids
    argmax = genparity.generate_ids(model, "ROMEO:", 10, temperature=0, ignore_eos=True,
                                    sampler=lambda lp: int(np.argmax(lp)))
    assert argmax == base
    last = genparity.generate_ids(model, "ROMEO:", 3, ignore_eos=True, sampler=lambda lp: model.n_vocab - 1)
    assert last == [model.n_vocab - 1] * 3


def test_seeded_sampling_repeats():
    model, tok = load("shakespeare-llama")
    a = genparity.generate_ids(model, "ROMEO:", 16, temperature=0.8, top_p=0.9, seed=7, ignore_eos=True)
    b = genparity.generate_ids(model, "ROMEO:", 16, temperature=0.8, top_p=0.9, seed=7, ignore_eos=True)
    c = genparity.generate_ids(model, "ROMEO:", 16, temperature=0.8, top_p=0.9, seed=8, ignore_eos=True)
    assert a == b and a != c


def test_prompt_cache_round_trip(tmp_path):
    model, tok = load("tiny-llama")
    p = reference("tiny-llama")["prompts"][0]
    ids = p["ids"]
    cache = genparity.make_prompt_cache(model)
    cache.eval(ids[:-1])
    assert cache.tokens == ids[:-1]
    f = tmp_path / "c.safetensors"
    genparity.save_prompt_cache(str(f), cache)
    loaded = genparity.load_prompt_cache(str(f), model=model)
    assert loaded.tokens == ids[:-1]
    # mlx-lm convention: the prompt continues the cached tokens
    got = genparity.generate_ids(model, ids[-1:], 8, temperature=0, prompt_cache=loaded)
    assert got == p["greedy_48"][:8]
    held = loaded.tokens
    assert held[:len(ids)] == ids and len(held) == len(ids) + 7
    more = genparity.generate_ids(model, got[-1:], 8, temperature=0, prompt_cache=loaded)
    assert more == p["greedy_48"][8:16]


@pytest.mark.xfail(reason="library bug (src/cache, seam's area): after gp_generate, gp_ctx_cache_save writes more "
                          "K/V rows than n_past, and gp_ctx_cache_load refuses the file", strict=False)
def test_prompt_cache_round_trip_after_generate(tmp_path):
    model, tok = load("tiny-llama")
    p = reference("tiny-llama")["prompts"][0]
    cache = genparity.make_prompt_cache(model)
    first = genparity.generate_ids(model, p["ids"], 8, temperature=0, prompt_cache=cache)
    f = tmp_path / "c.safetensors"
    genparity.save_prompt_cache(str(f), cache)
    loaded = genparity.load_prompt_cache(str(f), model=model)
    assert loaded.tokens == cache.tokens
    assert genparity.generate_ids(model, first[-1:], 8, temperature=0, prompt_cache=loaded) == p["greedy_48"][8:16]


def test_errors_carry_the_library_message(tmp_path):
    with pytest.raises(genparity.GenparityError) as e:
        genparity.load(str(tmp_path / "nope"))
    assert "nope" in str(e.value) and e.value.status.startswith("GP_ERR_")
    model, tok = load("tiny-llama")
    with pytest.raises(genparity.GenparityError) as e:
        tok.decode([1, -5])
    assert e.value.status == "GP_ERR_RANGE"
    assert tok.decode([model.n_vocab + 5]) == ""  # like tokenizers' decode (genparity.h)
    with pytest.raises(genparity.GenparityError):
        genparity.generate_ids(model, [1, model.n_vocab + 1], 4)
    with pytest.raises(genparity.GenparityError) as e:
        genparity.generate_ids(model, [1, 2], 4, top_p=1.5)
    assert "top_p" in str(e.value)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(genparity.GenparityError):
        genparity.load_prompt_cache(str(bad), model=model)
    with pytest.raises(TypeError):
        genparity.generate_ids(model, [1, 2], 4, no_such_knob=1)
    with pytest.raises(ValueError):
        genparity.generate_ids(model, [1, 2], 4, steering=[genparity.SteeringHook(0, np.zeros(3))])

    def boom(tokens, logits):
        raise KeyError("from the processor")
    with pytest.raises(KeyError):
        genparity.generate_ids(model, [1, 2], 4, logits_processors=[boom])
    # the model still works after every error
    p = reference("tiny-llama")["prompts"][0]
    assert genparity.generate_ids(model, p["ids"], 8, temperature=0) == p["greedy_48"][:8]
    with pytest.raises(genparity.GenparityError) as e:  # tiny-llama's folder has no chat template
        tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert e.value.status == "GP_ERR_MISSING"


@pytest.mark.parametrize("family,model", [("llama3", "tiny-llama3"), ("qwen3", "tiny-qwen3")])
def test_apply_chat_template_matches_transformers(fx, family, model):
    import json
    refs = json.loads((fx / "references" / "chat_templates.json").read_text())[family]
    _, tok = load(model)
    for i, r in enumerate(refs):
        kw = dict(r["kwargs"])
        tools = kw.pop("tools", None)
        text = tok.apply_chat_template(r["messages"], tools=tools, add_generation_prompt=r["add_generation_prompt"],
                                       tokenize=False, **kw)
        assert text == r["text"], f"{family} case {i}"
        ids = tok.apply_chat_template(r["messages"], tools=tools, add_generation_prompt=r["add_generation_prompt"],
                                      **kw)
        assert ids == r["ids"], f"{family} case {i}"
    print(f"{family}: {len(refs)}/{len(refs)} conversations rendered and encoded as transformers does")
    if family == "qwen3":  # qwen3's template reads message.content: a message without it is a template error
        with pytest.raises(genparity.GenparityError, match="content") as e:
            tok.apply_chat_template([{"role": "assistant"}, {"role": "user"}], tokenize=False)
        assert e.value.status == "GP_ERR_TEMPLATE"
    reply = genparity.parse_chat_reply("<think>hm</think>Hello")
    assert reply["content"] == "Hello" and reply["reasoning_content"] == "hm"
