"""_core.py — the Python objects over the C handles: errors, Tokenizer, Model, PromptCache, SteeringHook.

Everything goes through the public API of include/genparity.h (see _ffi.py).  Handles are freed when the Python
object is collected or closed; a Model outlives every PromptCache made from it (each cache keeps a reference).
"""
from __future__ import annotations

import ctypes
import json
import threading
from ctypes import POINTER, byref, c_char, c_int32, c_size_t, c_void_p
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

import numpy as np

from ._ffi import (STEER_FN, GpCtxParams, GpEvalOpts, GpMemInfo, GpSteerHook, f32p, i32p, lib)


class GenparityError(RuntimeError):
    """A failing library call: `status` is the gp_status name ("GP_ERR_FORMAT"), the message is gp_errmsg()."""

    def __init__(self, status: int, message: str):
        self.code = int(status)
        self.status = lib.gp_status_str(status).decode()
        super().__init__(f"{message} [{self.status}]" if message else self.status)


def check(status: int) -> None:
    """Raises GenparityError with the library's message (read on this thread) when status != GP_OK."""
    if status != 0:
        raise GenparityError(status, lib.gp_errmsg().decode("utf-8", "replace"))


def _ids_array(ids: Sequence[int]) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(ids, dtype=np.int64))
    if a.ndim != 1:
        raise ValueError("token ids must be a flat sequence of integers")
    if a.size and (a.min() < -2**31 or a.max() >= 2**31):
        raise ValueError("token id outside int32")
    return a.astype(np.int32)


def _i32ptr(a: np.ndarray):
    return a.ctypes.data_as(i32p)


def _f32ptr(a: np.ndarray):
    return a.ctypes.data_as(f32p)


class Tokenizer:
    """The model's tokenizer (tokenizer.json): encode/decode like transformers' fast tokenizer."""

    def __init__(self, handle: int, owner: object):
        self._h = handle
        self._owner = owner  # keeps the model (which owns the tokenizer) alive

    @property
    def vocab_size(self) -> int:
        """Number of ids (vocabulary plus added tokens)."""
        return lib.gp_tokenizer_n_vocab(self._h)

    @property
    def bos_token_id(self) -> Optional[int]:
        v = lib.gp_tokenizer_bos_id(self._h)
        return None if v < 0 else v

    @property
    def eos_token_id(self) -> Optional[int]:
        v = lib.gp_tokenizer_eos_id(self._h)
        return None if v < 0 else v

    @property
    def pad_token_id(self) -> Optional[int]:
        v = lib.gp_tokenizer_pad_id(self._h)
        return None if v < 0 else v

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Returns the ids of text, like transformers' tokenizer(text, add_special_tokens=...)["input_ids"]."""
        b = text.encode("utf-8", "surrogatepass")
        ids, n = i32p(), c_int32()
        check(lib.gp_tokenizer_encode(self._h, b, len(b), int(add_special_tokens), byref(ids), byref(n)))
        try:
            return ids[:n.value]
        finally:
            lib.gp_free(ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Returns the text of ids, like transformers' decode (ids past the vocabulary decode to ""); GenparityError
        for a negative id."""
        a = _ids_array(ids)
        text, n = POINTER(c_char)(), c_size_t()
        check(lib.gp_tokenizer_decode(self._h, _i32ptr(a), a.size, int(skip_special_tokens), byref(text),
                                      byref(n)))
        try:
            return ctypes.string_at(text, n.value).decode("utf-8", "replace")
        finally:
            lib.gp_free(text)

    def convert_tokens_to_ids(self, token: str) -> Optional[int]:
        v = lib.gp_tokenizer_token_to_id(self._h, token.encode())
        return None if v < 0 else v

    def convert_ids_to_tokens(self, i: int) -> Optional[str]:
        s = lib.gp_tokenizer_id_to_token(self._h, i)
        return None if s is None else s.decode("utf-8", "replace")

    def _template(self) -> int:
        if getattr(self, "_tmpl", None) is None:
            path = getattr(self._owner, "path", None)
            if path is None:
                raise ValueError("genparity: this tokenizer has no model folder to read a chat template from")
            h = c_void_p()
            check(lib.gp_chat_template_load(path.encode(), byref(h)))
            self._tmpl = h.value
        return self._tmpl

    def __del__(self):
        if getattr(self, "_tmpl", None):
            lib.gp_chat_template_free(self._tmpl)
            self._tmpl = None

    def apply_chat_template(self, conversation: list, tools: Optional[list] = None,
                            documents: Optional[list] = None, add_generation_prompt: bool = False,
                            tokenize: bool = True, chat_template: Optional[str] = None,
                            **kwargs) -> Union[str, list[int]]:
        """Renders a conversation with the model folder's chat template like transformers' apply_chat_template:
        returns the text (tokenize=False) or its ids encoded without special tokens (tokenize=True).

        tools / documents: JSON-serialisable lists; chat_template: a template name from tokenizer_config.json;
        other keyword arguments (enable_thinking=...) become template variables.  A template's raise_exception()
        is a GenparityError carrying its message."""
        o = lib.gp_chat_opts_default()
        keep = [json.dumps(conversation).encode()]
        o.messages_json = keep[0]
        if tools is not None:
            keep.append(json.dumps(tools).encode())
            o.tools_json = keep[-1]
        if documents is not None:
            keep.append(json.dumps(documents).encode())
            o.documents_json = keep[-1]
        if kwargs:
            keep.append(json.dumps(kwargs).encode())
            o.kwargs_json = keep[-1]
        if chat_template is not None:
            keep.append(chat_template.encode())
            o.template_name = keep[-1]
        o.add_generation_prompt = int(add_generation_prompt)
        text, n = POINTER(c_char)(), c_size_t()
        check(lib.gp_chat_template_render(self._template(), byref(o), byref(text), byref(n)))
        try:
            s = ctypes.string_at(text, n.value).decode("utf-8", "replace")
        finally:
            lib.gp_free(text)
        return self.encode(s, add_special_tokens=False) if tokenize else s


def parse_chat_reply(text: str) -> dict:
    """Splits a chat model's reply into {"content", "reasoning_content", "tool_calls"} (OpenAI-style) like the
    server does: <think>...</think> reasoning, Hermes/Qwen <tool_call> blocks or a Llama 3.x JSON tool call."""
    b = text.encode("utf-8", "surrogatepass")
    out = POINTER(c_char)()
    check(lib.gp_chat_parse_reply(b, len(b), byref(out)))
    try:
        return json.loads(ctypes.string_at(out).decode("utf-8", "replace"))
    finally:
        lib.gp_free(out)


_SCHEDULES = {"constant": 0, "ramp": 1, "warmup": 2}


@dataclass
class SteeringHook:
    """Adds a * vector to the output of decoder `layer` at every position (prompt included).

    schedule: "constant" (a = alpha), "ramp" (a = alpha * min(1, (s+1)/steps)), "warmup" (0 for the first `steps`
    forward steps, then alpha), or a callable step -> coefficient (s = 0 is the prompt's prefill)."""
    layer: int
    vector: np.ndarray
    alpha: float = 1.0
    schedule: Union[str, Callable[[int], float]] = "constant"
    steps: int = 0


class Adapter:
    """A LoRA adapter (mlx-lm or PEFT folder) loaded for one model; shareable by every cache of that model."""

    def __init__(self, model: "Model", path: str):
        h = c_void_p()
        check(lib.gp_adapter_load(model._h, str(path).encode(), byref(h)))
        self._h, self.model, self.path = h.value, model, str(path)
        model._children += 1

    @property
    def rank(self) -> int:
        return lib.gp_adapter_rank(self._h)

    @property
    def scale(self) -> float:
        return lib.gp_adapter_scale(self._h)

    def __del__(self):
        if getattr(self, "_h", None):
            lib.gp_adapter_free(self._h)
            self._h = None
            self.model._release()


AdapterSpec = Sequence[Union["Adapter", tuple]]  # Adapter, or (Adapter, scale)


def _set_adapters(ctx: int, adapters: AdapterSpec) -> None:
    items = [a if isinstance(a, tuple) else (a, 1.0) for a in adapters]
    hs = (c_void_p * max(1, len(items)))(*[a._h for a, _ in items])
    sc = (ctypes.c_float * max(1, len(items)))(*[float(s) for _, s in items])
    check(lib.gp_ctx_set_adapters(ctx, hs, sc, len(items)))


class Model:
    """A loaded model folder (immutable, shareable).  `model.tokenizer` is its tokenizer or None.
    `model.adapters` (set by load(adapter_path=...) or set_adapters) apply to every cache created afterwards."""

    def __init__(self, path: str):
        h = c_void_p()
        check(lib.gp_model_load(str(path).encode(), None, byref(h)))
        self._h = h.value
        self.path = str(path)
        t = lib.gp_model_tokenizer(self._h)
        self.tokenizer: Optional[Tokenizer] = Tokenizer(t, self) if t else None
        self._default_cache: Optional[PromptCache] = None
        self.lock = threading.Lock()
        self.adapters: list = []
        self._children = 0  # open caches and adapters of this model
        self._close_pending = False

    def load_adapter(self, path: str) -> Adapter:
        """Loads a LoRA adapter folder for this model (GenparityError naming the file and field if it does not fit)."""
        return Adapter(self, path)

    def set_adapters(self, adapters: AdapterSpec) -> None:
        """Adapters (Adapter or (Adapter, scale)) for caches created from now on, and for the default cache."""
        self.adapters = list(adapters)
        if self._default_cache is not None:
            self._default_cache.set_adapters(self.adapters)

    def __del__(self):
        self.close()

    def close(self) -> None:
        """Frees the model (after its default cache); later calls on it are invalid."""
        if getattr(self, "_h", None):
            if self._default_cache is not None:
                self._default_cache.close()
                self._default_cache = None
            self.adapters = []
            if self._children:  # caches or adapters still open: the last one to close frees the model (garbage
                self._close_pending = True  # collection may finalize the model before them)
                return
            lib.gp_model_free(self._h)
            self._h = None

    def _release(self) -> None:
        """A cache or adapter of this model was freed; frees the model when a close() was waiting for it."""
        self._children -= 1
        if self._close_pending and not self._children and self._h:
            lib.gp_model_free(self._h)
            self._h = None

    @property
    def arch(self) -> str:
        return lib.gp_model_arch(self._h).decode()

    @property
    def n_vocab(self) -> int:
        return lib.gp_model_n_vocab(self._h)

    @property
    def n_layers(self) -> int:
        return lib.gp_model_n_layers(self._h)

    @property
    def n_embd(self) -> int:
        return lib.gp_model_n_embd(self._h)

    @property
    def max_position_embeddings(self) -> int:
        return lib.gp_model_n_ctx_train(self._h)

    @property
    def eos_token_ids(self) -> list[int]:
        buf = (c_int32 * 8)()
        n = lib.gp_model_eos_ids(self._h, buf, 8)
        return list(buf[:min(n, 8)])

    def default_cache(self) -> "PromptCache":
        """The cache generate() uses when none is given (created on first use; reuses the previous call's prefix)."""
        if self._default_cache is None:
            self._default_cache = PromptCache(self)
        return self._default_cache

    def forward(self, ids: Sequence[int], hidden_layers: Optional[Sequence[int]] = None,
                all_logits: bool = False) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """Runs ids through a fresh context; returns (logits, hidden).

        logits: [n_vocab] for the last position, or [n, n_vocab] with all_logits.  hidden: None, or float32
        [len(hidden_layers), n, n_embd] with transformers' output_hidden_states indices (0 = embeddings, i = output
        of decoder layer i-1, n_layers = the final norm's output)."""
        cache = PromptCache(self)
        try:
            return cache.eval(ids, hidden_layers=hidden_layers, all_logits=all_logits)
        finally:
            cache.close()

    def hidden_states(self, ids: Sequence[int], layers: Sequence[int]) -> np.ndarray:
        """Returns float32 [len(layers), len(ids), n_embd]: the hidden states of a fresh forward pass over ids."""
        return self.forward(ids, hidden_layers=layers)[1]


class PromptCache:
    """A KV cache (one gp_ctx) of a model: pass it as generate(..., prompt_cache=cache) to keep state between calls.

    Contexts belong to one thread at a time; the cache serialises its users with a lock."""

    def __init__(self, model: Model, max_kv_size: Optional[int] = None, n_ctx: int = 0, n_threads: int = 0,
                 kv_bits: Optional[int] = None, kv_group_size: int = 64, keep: int = 0, compute: str = "f32"):
        p: GpCtxParams = lib.gp_ctx_default_params()
        p.n_ctx, p.n_threads = n_ctx, n_threads
        if compute not in ("f32", "bf16"):
            raise ValueError(f"genparity: compute must be 'f32' or 'bf16', not {compute!r}")
        p.compute = 1 if compute == "bf16" else 0
        if max_kv_size:
            p.max_kv_size, p.keep = max_kv_size, keep
        if kv_bits:
            p.kv_bits, p.kv_group_size = kv_bits, kv_group_size
        h = c_void_p()
        check(lib.gp_ctx_init(model._h, byref(p), byref(h)))
        self._h = h.value
        self.model = model
        self.lock = threading.RLock()
        self._steer_refs: list = []
        self._adapters: list = []
        model._children += 1
        if model.adapters:
            self.set_adapters(model.adapters)

    def set_adapters(self, adapters: AdapterSpec) -> None:
        """Replaces this cache's LoRA adapters (hot swap: the model is untouched; positions computed under the old
        set are not reused for a new prompt)."""
        with self.lock:
            _set_adapters(self._h, adapters)
            self._adapters = list(adapters)  # keeps them alive while set

    def __del__(self):
        self.close()

    def close(self) -> None:
        if getattr(self, "_h", None):
            lib.gp_ctx_free(self._h)
            self._h = None
            self.model._release()

    @property
    def tokens(self) -> list[int]:
        """The ids whose keys/values the cache holds."""
        n = c_int32()
        p = lib.gp_ctx_tokens(self._h, byref(n))
        return p[:n.value] if n.value else []

    def __len__(self) -> int:
        return lib.gp_ctx_n_past(self._h)

    def reset(self) -> None:
        """Empties the cache."""
        lib.gp_ctx_reset(self._h)

    def trim(self, n: int) -> None:
        """Keeps the first n positions."""
        check(lib.gp_ctx_trim(self._h, n))

    def memory(self) -> dict:
        """Returns weight_bytes, kv_bytes, scratch_bytes and peak_rss_bytes."""
        m = GpMemInfo()
        check(lib.gp_ctx_memory(self._h, byref(m)))
        return {k: getattr(m, k) for k, _ in GpMemInfo._fields_}

    def save(self, path: str) -> None:
        check(lib.gp_ctx_cache_save(self._h, str(path).encode()))

    def load(self, path: str) -> None:
        check(lib.gp_ctx_cache_load(self._h, str(path).encode()))

    def set_steering(self, hooks: Sequence[SteeringHook] = (), logit_bias_vector: Optional[np.ndarray] = None,
                     logit_bias_alpha: float = 1.0) -> None:
        """Replaces the cache's steering: residual-injection hooks and the logit-bias vector alpha * (W_out @ v)."""
        lib.gp_ctx_steer_clear(self._h)
        self._steer_refs = []
        n_embd = self.model.n_embd
        for hk in hooks:
            v = np.ascontiguousarray(hk.vector, dtype=np.float32).reshape(-1)
            if v.size != n_embd:
                raise ValueError(f"steering vector has {v.size} values; the model's hidden size is {n_embd}")
            h = GpSteerHook(layer=hk.layer, vector=_f32ptr(v), alpha=hk.alpha, steps=hk.steps)
            if callable(hk.schedule):
                fn = hk.schedule
                cb = STEER_FN(lambda step, _ud, fn=fn: float(fn(step)))
                h.schedule, h.fn = 3, cb
                self._steer_refs.append(cb)
            elif hk.schedule in _SCHEDULES:
                h.schedule = _SCHEDULES[hk.schedule]
            else:
                raise ValueError(f"unknown steering schedule {hk.schedule!r} (constant, ramp, warmup or a callable)")
            check(lib.gp_ctx_steer_add(self._h, byref(h)))
        if logit_bias_vector is not None:
            v = np.ascontiguousarray(logit_bias_vector, dtype=np.float32).reshape(-1)
            if v.size != n_embd:
                raise ValueError(f"logit-bias vector has {v.size} values; the model's hidden size is {n_embd}")
            check(lib.gp_ctx_logit_bias_vector(self._h, _f32ptr(v), logit_bias_alpha))

    def eval(self, ids: Sequence[int], hidden_layers: Optional[Sequence[int]] = None,
             all_logits: bool = False) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """Appends ids to the cache (one forward); returns (logits, hidden) as in Model.forward."""
        a = _ids_array(ids)
        if a.size == 0:
            raise ValueError("eval needs at least one token id")
        V = self.model.n_vocab
        logits = np.empty((a.size, V) if all_logits else (V,), dtype=np.float32)
        opts = GpEvalOpts(all_logits=int(all_logits))
        hidden = None
        if hidden_layers is not None:
            layers = _ids_array(hidden_layers)
            hidden = np.empty((layers.size, a.size, self.model.n_embd), dtype=np.float32)
            opts.hidden_layers, opts.n_hidden_layers, opts.hidden_out = _i32ptr(layers), layers.size, _f32ptr(hidden)
        with self.lock:
            check(lib.gp_ctx_eval(self._h, _i32ptr(a), a.size, byref(opts), _f32ptr(logits)))
        return logits, hidden


def steering_vector_load(spec: str) -> np.ndarray:
    """Loads a steering vector ("FILE.safetensors[:TENSOR]", .npy or raw float32) as float32 numpy."""
    v, n = f32p(), c_int32()
    check(lib.gp_steer_vector_load(spec.encode(), byref(v), byref(n)))
    try:
        return np.ctypeslib.as_array(v, shape=(n.value,)).copy()
    finally:
        lib.gp_free(v)
