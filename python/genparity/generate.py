"""generate.py — mlx-lm-shaped entry points: load, generate, stream_generate, prompt caches.

Generation knobs keep transformers' names and semantics (they start from the model's generation_config.json, like
transformers' generate()); `temperature=0` means greedy, and any other sampling knob (temperature > 0, top_k, top_p,
min_p, typical_p, epsilon_cutoff, eta_cutoff) turns sampling on unless do_sample is given, like the CLI's flags.
"""
from __future__ import annotations

import ctypes
import queue
import resource
import threading
import time
from ctypes import byref, c_char_p
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence, Union

import numpy as np

from ._core import GenparityError, Model, PromptCache, SteeringHook, Tokenizer, _ids_array, _i32ptr, check
from ._ffi import (LOGITS_PROC_FN, SAMPLER_FN, TOKEN_CB, GpGenConfig, GpGenResultBuf, GpLogitsProcessor,
                   GpSeqBias, GpTokenBias, GpTokenSeq, lib)

Prompt = Union[str, Sequence[int]]
LogitsProcessor = Callable[[np.ndarray, np.ndarray], np.ndarray]
Sampler = Callable[[np.ndarray], int]

_SAMPLING_KNOBS = ("top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff")
_PLAIN = {  # kwarg -> (field, type)
    "top_k": int, "top_p": float, "min_p": float, "typical_p": float, "epsilon_cutoff": float,
    "eta_cutoff": float, "repetition_penalty": float, "no_repeat_ngram_size": int, "min_new_tokens": int,
    "min_length": int, "max_length": int, "forced_bos_token_id": int, "forced_eos_token_id": int,
    "max_time": float, "frequency_penalty": float, "presence_penalty": float, "penalty_window": int,
    "ignore_eos": bool, "skip_special_tokens": bool,
}


def load(path_or_hf_repo: str, adapter_path: Optional[str] = None, tokenizer_config: Optional[dict] = None
         ) -> tuple[Model, Optional[Tokenizer]]:
    """Loads a Hugging Face / MLX model folder (and a LoRA adapter folder, mlx-lm or PEFT layout, applied unfused);
    returns (model, tokenizer).  Raises GenparityError on bad files."""
    m = Model(path_or_hf_repo)
    if adapter_path is not None:  # mlx-lm's load(path, adapter_path=...): every cache of m runs the adapter
        m.set_adapters([m.load_adapter(adapter_path)])
    return m, m.tokenizer


def make_prompt_cache(model: Model, max_kv_size: Optional[int] = None, **ctx_params) -> PromptCache:
    """Returns an empty cache for model (max_kv_size: a rotating cache of that many positions)."""
    return PromptCache(model, max_kv_size=max_kv_size, **ctx_params)


def save_prompt_cache(file_name: str, cache: PromptCache, metadata: Optional[dict] = None) -> None:
    """Writes the cache (token ids, keys/values, model fingerprint, steering) to a safetensors file.
    `metadata` is accepted for mlx-lm compatibility and not stored."""
    cache.save(file_name)


def load_prompt_cache(file_name: str, model: Optional[Model] = None, return_metadata: bool = False):
    """Reads a cache file written by save_prompt_cache for `model` (required: the file is checked against it)."""
    if model is None:
        raise TypeError("genparity: load_prompt_cache(file, model=...) needs the model the cache belongs to")
    c = PromptCache(model)
    c.load(file_name)
    return (c, {}) if return_metadata else c


@dataclass
class GenerationResponse:
    """One streamed step, like mlx-lm's GenerationResponse.  logprobs: float32 [n_vocab] log-softmax of the scores
    the token was chosen from (after the processors, before temperature/top-k/...; None for ids-only models)."""
    text: str
    token: int
    logprobs: Optional[np.ndarray]
    prompt_tokens: int
    prompt_tps: float
    generation_tokens: int
    generation_tps: float
    peak_memory: float  # GB, the process's peak resident set
    finish_reason: Optional[str] = None
    from_draft: bool = False


class _Built:
    """A gp_gen_config plus the Python objects its pointers borrow (kept alive for the call)."""

    def __init__(self):
        self.buf = None
        self.keep: list = []
        self.error: Optional[BaseException] = None


def _seq_arrays(b: _Built, seqs, kind: str):
    arrs = [_ids_array(s) for s in seqs]
    b.keep.extend(arrs)
    return arrs


def _build_config(model: Model, max_tokens: int, kw: dict) -> _Built:
    b = _Built()
    b.buf = lib.gp_model_gen_config(model._h)
    g: GpGenConfig = b.buf.cfg
    g.max_new_tokens = int(kw.pop("max_new_tokens", max_tokens))
    temperature = kw.pop("temperature", kw.pop("temp", None))
    do_sample = kw.pop("do_sample", None)
    if any(k in kw for k in _SAMPLING_KNOBS) or (temperature is not None and temperature > 0):
        g.do_sample = 1
    if temperature is not None:
        if temperature == 0:
            g.do_sample = 0
        else:
            g.temperature = float(temperature)
    if do_sample is not None:
        g.do_sample = int(bool(do_sample))
    for k, typ in _PLAIN.items():
        if k in kw:
            setattr(g, k, typ(kw.pop(k)))
    if "repetition_context_size" in kw:
        g.penalty_window = int(kw.pop("repetition_context_size"))
    if "seed" in kw:
        g.seed = int(kw.pop("seed"))
    eos = kw.pop("eos_token_id", None)
    if eos is not None:
        eos = [eos] if isinstance(eos, int) else list(eos)
        if len(eos) > 8:
            raise ValueError("at most 8 eos_token_id values")
        g.n_eos = len(eos)
        for i, e in enumerate(eos):
            g.eos_ids[i] = int(e)
    _build_arrays(b, g, kw)
    if kw:
        raise TypeError(f"genparity: unknown generation argument(s): {', '.join(sorted(kw))}")
    return b


def _build_arrays(b: _Built, g: GpGenConfig, kw: dict) -> None:
    bad = kw.pop("bad_words_ids", None)
    if bad:
        arrs = _seq_arrays(b, bad, "bad_words_ids")
        t = (GpTokenSeq * len(arrs))(*[GpTokenSeq(_i32ptr(a), a.size) for a in arrs])
        b.keep.append(t)
        g.bad_words_ids, g.n_bad_words_ids = t, len(arrs)
    sb = kw.pop("sequence_bias", None)
    if sb:
        items = list(sb.items()) if isinstance(sb, dict) else [(s, v) for s, v in sb]
        arrs = _seq_arrays(b, [s for s, _ in items], "sequence_bias")
        t = (GpSeqBias * len(arrs))(*[GpSeqBias(_i32ptr(a), a.size, float(v)) for a, (_, v) in zip(arrs, items)])
        b.keep.append(t)
        g.sequence_bias, g.n_sequence_bias = t, len(arrs)
    for name in ("suppress_tokens", "begin_suppress_tokens"):
        v = kw.pop(name, None)
        if v:
            a = _ids_array(v)
            b.keep.append(a)
            setattr(g, name, _i32ptr(a))
            setattr(g, "n_" + name, a.size)
    stops = kw.pop("stop_strings", None)
    if stops:
        stops = [stops] if isinstance(stops, str) else list(stops)
        t = (c_char_p * len(stops))(*[s.encode() for s in stops])
        b.keep.append(t)
        g.stop_strings, g.n_stop_strings = t, len(stops)
    lb = kw.pop("logit_bias", None)
    if lb:
        t = (GpTokenBias * len(lb))(*[GpTokenBias(int(k), float(v)) for k, v in lb.items()])
        b.keep.append(t)
        g.logit_bias, g.n_logit_bias = t, len(lb)


def _install_hooks(b: _Built, g: GpGenConfig, logits_processors, sampler, want_logprobs: bool, state: dict):
    """Adds the caller's processors (numpy in, numpy out), a last processor that records log-softmax for the
    response, and the sampler hook.  An exception inside a hook stops generation and is re-raised."""
    procs = list(logits_processors or [])

    def run_procs(ids_p, n_ids, scores_p, n_vocab, _ud):
        try:
            scores = np.ctypeslib.as_array(scores_p, shape=(n_vocab,))
            ids = np.ctypeslib.as_array(ids_p, shape=(n_ids,)).copy()
            for p in procs:
                out = p(ids, scores)
                if out is not scores:
                    scores[:] = np.asarray(out, dtype=np.float32).reshape(-1)
            if want_logprobs:
                x = scores.astype(np.float64)
                mx = x.max()
                state["logprobs"] = (x - (mx + np.log(np.exp(x - mx).sum()))).astype(np.float32)
            return 0
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            b.error = e
            return 9

    if procs or want_logprobs:
        cb = LOGITS_PROC_FN(run_procs)
        arr = (GpLogitsProcessor * 1)(GpLogitsProcessor(cb, None))
        b.keep += [cb, arr]
        g.logits_processors, g.n_logits_processors = arr, 1
    if sampler is not None:
        def run_sampler(scores_p, n_vocab, ids_p, n_ids, u, _ud, out_p):
            try:
                x = np.ctypeslib.as_array(scores_p, shape=(n_vocab,)).astype(np.float64)
                mx = x.max()
                lp = (x - (mx + np.log(np.exp(x - mx).sum()))).astype(np.float32)
                out_p[0] = int(np.asarray(sampler(lp)).reshape(-1)[0])
                return 0
            except BaseException as e:  # noqa: BLE001
                b.error = e
                return 9
        scb = SAMPLER_FN(run_sampler)
        b.keep.append(scb)
        g.sampler = scb


def _prompt_ids(model: Model, tokenizer: Optional[Tokenizer], prompt: Prompt, cache: PromptCache) -> np.ndarray:
    """The full sequence to prefill: a fresh prompt, or (mlx-lm's convention) the cache's tokens + prompt when an
    explicit cache already holds tokens (the text is then encoded without special tokens)."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("genparity: the model has no tokenizer.json; pass the prompt as a list of ids")
        ids = tokenizer.encode(prompt, add_special_tokens=len(cache) == 0 or cache is model._default_cache)
    else:
        ids = list(_ids_array(prompt))
    if cache is not model._default_cache and len(cache):
        ids = cache.tokens + list(ids)
    a = _ids_array(ids)
    if a.size == 0:
        raise ValueError("genparity: the prompt encodes to no tokens")
    return a


def stream_generate(model: Model, tokenizer: Optional[Tokenizer], prompt: Prompt, max_tokens: int = 256,
                    *, prompt_cache: Optional[PromptCache] = None, sampler: Optional[Sampler] = None,
                    logits_processors: Optional[Sequence[LogitsProcessor]] = None,
                    steering: Optional[Sequence[SteeringHook]] = None, logit_bias_vector: Optional[np.ndarray] = None,
                    logit_bias_alpha: float = 1.0, **kwargs) -> Iterator[GenerationResponse]:
    """Yields one GenerationResponse per generated token; the last one has finish_reason set.

    prompt: text (encoded with special tokens) or ids.  prompt_cache: keep state between calls (mlx-lm
    convention: the prompt continues the cached tokens).  steering / logit_bias_vector replace the cache's hooks for
    this call.  Other keyword arguments are transformers' generation knobs (see the module doc)."""
    cache = prompt_cache if prompt_cache is not None else model.default_cache()
    b = _build_config(model, max_tokens, dict(kwargs))
    ids = _prompt_ids(model, tokenizer, prompt, cache)
    g = b.buf.cfg
    state: dict = {"logprobs": None}
    _install_hooks(b, g, logits_processors, sampler, True, state)
    q: queue.Queue = queue.Queue()
    cancel = threading.Event()
    t0 = time.perf_counter()
    times: dict = {}

    def on_token(ev_p, _ud):
        ev = ev_p.contents
        now = time.perf_counter()
        times.setdefault("first", now)
        piece = ctypes.string_at(ev.piece, ev.piece_len).decode("utf-8", "replace") if ev.piece else ""
        fin = lib.gp_finish_reason_str(ev.finish).decode() if ev.finish else None
        q.put(("tok", ev.id, ev.index, piece, state["logprobs"], fin, now))
        return 1 if cancel.is_set() else 0

    cb = TOKEN_CB(on_token)

    def worker():
        buf = GpGenResultBuf()
        res = buf.res
        try:
            with cache.lock:
                if steering is not None or logit_bias_vector is not None:
                    cache.set_steering(steering or (), logit_bias_vector, logit_bias_alpha)
                st = lib.gp_generate(cache._h, _i32ptr(ids), ids.size, byref(g), cb, None, byref(buf))
                msg = lib.gp_errmsg().decode("utf-8", "replace")
                peak = cache.memory()["peak_rss_bytes"]
            q.put(("end", st, msg, peak, res.n_prompt, res.prompt_seconds,
                   lib.gp_finish_reason_str(res.finish_reason).decode()))
        except BaseException as e:  # noqa: BLE001
            q.put(("exc", e))
        finally:
            lib.gp_gen_result_free(byref(buf))

    th = threading.Thread(target=worker, daemon=True)
    th.start()
    n_prompt = ids.size
    try:
        pending = None
        while True:
            item = q.get()
            if item[0] == "exc":
                raise item[1]
            if item[0] == "end":
                _, st, msg, peak, n_prompt_done, pre_s, fin = item
                if b.error is not None:
                    raise b.error
                if st not in (0, 9):
                    raise GenparityError(st, msg)
                if pending is not None:
                    pending.peak_memory = max(pending.peak_memory, peak / 1e9)
                    if pending.finish_reason is None and not cancel.is_set():
                        pending.finish_reason = fin
                    yield pending
                return
            _, tok, index, piece, lp, fin, now = item
            first = times["first"]
            ptps = n_prompt / max(first - t0, 1e-9)
            gtps = index / (now - first) if index > 0 else 0.0
            peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
            resp = GenerationResponse(piece, tok, lp, n_prompt, ptps, index + 1, gtps, peak_gb, fin)
            if pending is not None:
                yield pending
            pending = resp
    finally:
        cancel.set()
        th.join()


def generate(model: Model, tokenizer: Optional[Tokenizer], prompt: Prompt, max_tokens: int = 256,
             verbose: bool = False, **kwargs) -> str:
    """Generates and returns the text (stop string and the stopping EOS left out).  verbose prints it as it comes
    and the speeds at the end, like mlx-lm.  Keyword arguments as in stream_generate."""
    text = []
    last = None
    for r in stream_generate(model, tokenizer, prompt, max_tokens, **kwargs):
        if verbose:
            print(r.text, end="", flush=True)
        text.append(r.text)
        last = r
    if verbose and last is not None:
        print()
        print("=" * 10)
        print(f"Prompt: {last.prompt_tokens} tokens, {last.prompt_tps:.3f} tokens-per-sec")
        print(f"Generation: {last.generation_tokens} tokens, {last.generation_tps:.3f} tokens-per-sec")
        print(f"Peak memory: {last.peak_memory:.3f} GB")
    return "".join(text)


def generate_ids(model: Model, prompt: Prompt, max_tokens: int = 256, *,
                 prompt_cache: Optional[PromptCache] = None, **kwargs) -> list[int]:
    """Returns the generated ids (EOS included when it stopped generation); same arguments as stream_generate."""
    return [r.token for r in stream_generate(model, model.tokenizer, prompt, max_tokens, prompt_cache=prompt_cache,
                                             **kwargs)]


__all__ = ["load", "generate", "stream_generate", "generate_ids", "make_prompt_cache", "save_prompt_cache",
           "load_prompt_cache", "GenerationResponse", "GenparityError", "Model", "Tokenizer", "PromptCache",
           "SteeringHook"]
