"""_ffi.py — ctypes declarations of include/genparity.h (the library's whole public API) and the library lookup.

Only the public header is mirrored here.  Struct layouts must match the header exactly; python/tests/test_abi.py
compiles a small C program that prints every field's offset and checks these declarations against it.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_float, c_int, c_int32, c_size_t,
                    c_uint32, c_uint64, c_void_p)
from pathlib import Path
from typing import Optional

i32p = POINTER(c_int32)
f32p = POINTER(c_float)


class GpModelParams(Structure):
    _fields_ = [("load_tokenizer", c_int32), ("progress", c_void_p), ("progress_user_data", c_void_p)]


class GpCtxParams(Structure):
    _fields_ = [("n_ctx", c_int32), ("n_threads", c_int32), ("prefill_chunk", c_int32), ("max_kv_size", c_int32),
                ("keep", c_int32), ("kv_bits", c_int32), ("kv_group_size", c_int32),
                ("quantized_kv_start", c_int32), ("mem_limit_bytes", c_uint64), ("device", c_int32),
                ("compute", c_int32)]


class GpMemInfo(Structure):
    _fields_ = [("weight_bytes", c_uint64), ("kv_bytes", c_uint64), ("scratch_bytes", c_uint64),
                ("peak_rss_bytes", c_uint64)]


class GpEvalOpts(Structure):
    _fields_ = [("all_logits", c_int32), ("hidden_layers", i32p), ("n_hidden_layers", c_int32),
                ("hidden_out", f32p)]


STEER_FN = CFUNCTYPE(c_float, c_int32, c_void_p)


class GpSteerHook(Structure):
    _fields_ = [("layer", c_int32), ("vector", f32p), ("alpha", c_float), ("schedule", c_int),
                ("steps", c_int32), ("fn", STEER_FN), ("user_data", c_void_p)]


class GpTokenSeq(Structure):
    _fields_ = [("ids", i32p), ("n", c_int32)]


class GpSeqBias(Structure):
    _fields_ = [("ids", i32p), ("n", c_int32), ("bias", c_double)]


class GpTokenBias(Structure):
    _fields_ = [("id", c_int32), ("bias", c_double)]


LOGITS_PROC_FN = CFUNCTYPE(c_int, i32p, c_int32, f32p, c_int32, c_void_p)
SAMPLER_FN = CFUNCTYPE(c_int, f32p, c_int32, i32p, c_int32, c_double, c_void_p, i32p)


class GpLogitsProcessor(Structure):
    _fields_ = [("fn", LOGITS_PROC_FN), ("user_data", c_void_p)]


GP_MAX_EOS = 8


class GpGenConfig(Structure):
    _fields_ = [
        ("max_new_tokens", c_int32), ("do_sample", c_int32), ("temperature", c_double), ("top_k", c_int32),
        ("top_p", c_double), ("eos_ids", c_int32 * GP_MAX_EOS), ("n_eos", c_int32), ("ignore_eos", c_int32),
        ("seed", c_uint64), ("max_length", c_int32), ("min_new_tokens", c_int32), ("min_length", c_int32),
        ("min_p", c_double), ("typical_p", c_double), ("epsilon_cutoff", c_double), ("eta_cutoff", c_double),
        ("repetition_penalty", c_double), ("no_repeat_ngram_size", c_int32),
        ("bad_words_ids", POINTER(GpTokenSeq)), ("n_bad_words_ids", c_int32),
        ("sequence_bias", POINTER(GpSeqBias)), ("n_sequence_bias", c_int32),
        ("suppress_tokens", i32p), ("n_suppress_tokens", c_int32),
        ("begin_suppress_tokens", i32p), ("n_begin_suppress_tokens", c_int32),
        ("forced_bos_token_id", c_int32), ("forced_eos_token_id", c_int32),
        ("stop_strings", POINTER(c_char_p)), ("n_stop_strings", c_int32), ("max_time", c_double),
        ("skip_special_tokens", c_int32), ("frequency_penalty", c_double), ("presence_penalty", c_double),
        ("logit_bias", POINTER(GpTokenBias)), ("n_logit_bias", c_int32), ("penalty_window", c_int32),
        ("logits_processors", POINTER(GpLogitsProcessor)), ("n_logits_processors", c_int32),
        ("sampler", SAMPLER_FN), ("sampler_user_data", c_void_p), ("logprobs", c_int32),
        ("top_logprobs", c_int32), ("logprobs_raw", c_int32), ("_owned", c_void_p),
        ("num_beams", c_int32), ("num_return_sequences", c_int32), ("length_penalty", c_double),
        ("early_stopping", c_int32), ("encoder_repetition_penalty", c_double),
        ("encoder_no_repeat_ngram_size", c_int32), ("remove_invalid_values", c_int32),
        ("exponential_decay_start", c_int32), ("exponential_decay_factor", c_double), ("renormalize_logits", c_int32),
    ]


class GpGenConfigBuf(Structure):
    """A gp_gen_config followed by spare bytes, so that a library built from a newer header with appended fields
    never writes past the buffer ctypes hands it (test_abi.py still checks that the known prefix matches)."""
    _fields_ = [("cfg", GpGenConfig), ("_spare", ctypes.c_ubyte * 512)]


class GpTopLogprob(Structure):
    _fields_ = [("id", c_int32), ("logprob", c_float)]


class GpGenResult(Structure):
    _fields_ = [("tokens", i32p), ("n_tokens", c_int32), ("finish_reason", c_int), ("n_prompt", c_int32),
                ("prompt_seconds", c_double), ("gen_seconds", c_double), ("text", ctypes.POINTER(ctypes.c_char)),
                ("text_len", c_size_t), ("stop_index", c_int32), ("logprobs", f32p),
                ("top_logprobs", POINTER(GpTopLogprob)), ("n_top", c_int32), ("sequences", c_void_p),
                ("n_sequences", c_int32)]


class GpGenResultBuf(Structure):
    """A gp_gen_result followed by spare zeroed bytes: gp_generate fills the whole struct of the library's header, so
    fields appended there (beam-search sequences, ...) land in the spare bytes, and gp_gen_result_free frees them."""
    _fields_ = [("res", GpGenResult), ("_spare", ctypes.c_ubyte * 512)]


class GpTokenEvent(Structure):
    _fields_ = [("id", c_int32), ("index", c_int32), ("piece", ctypes.POINTER(ctypes.c_char)),
                ("piece_len", c_size_t), ("logprob", c_float), ("top", POINTER(GpTopLogprob)), ("n_top", c_int32),
                ("finish", c_int)]


TOKEN_CB = CFUNCTYPE(c_int, POINTER(GpTokenEvent), c_void_p)


class GpChatOpts(Structure):
    _fields_ = [("messages_json", c_char_p), ("tools_json", c_char_p), ("documents_json", c_char_p),
                ("kwargs_json", c_char_p), ("add_generation_prompt", c_int32), ("template_name", c_char_p),
                ("now", ctypes.c_int64)]

# struct name in genparity.h -> ctypes class (used by the ABI test)
STRUCTS = {
    "gp_model_params": GpModelParams, "gp_ctx_params": GpCtxParams, "gp_mem_info": GpMemInfo,
    "gp_eval_opts": GpEvalOpts, "gp_steer_hook": GpSteerHook, "gp_token_seq": GpTokenSeq,
    "gp_seq_bias": GpSeqBias, "gp_token_bias": GpTokenBias, "gp_logits_processor": GpLogitsProcessor,
    "gp_gen_config": GpGenConfig, "gp_top_logprob": GpTopLogprob, "gp_gen_result": GpGenResult,
    "gp_token_event": GpTokenEvent, "gp_chat_opts": GpChatOpts,
}

# name -> (restype, argtypes)
_SIGS = {
    "gp_status_str": (c_char_p, [c_int]),
    "gp_errmsg": (c_char_p, []),
    "gp_version": (c_char_p, []),
    "gp_tokenizer_load_dir": (c_int, [c_char_p, POINTER(c_void_p)]),
    "gp_tokenizer_free": (None, [c_void_p]),
    "gp_tokenizer_encode": (c_int, [c_void_p, c_char_p, c_size_t, c_int, POINTER(i32p), i32p]),
    "gp_tokenizer_decode": (c_int, [c_void_p, i32p, c_int32, c_int, POINTER(ctypes.POINTER(ctypes.c_char)),
                                    POINTER(c_size_t)]),
    "gp_tokenizer_n_vocab": (c_int32, [c_void_p]),
    "gp_tokenizer_token_to_id": (c_int32, [c_void_p, c_char_p]),
    "gp_tokenizer_id_to_token": (c_char_p, [c_void_p, c_int32]),
    "gp_tokenizer_bos_id": (c_int32, [c_void_p]),
    "gp_tokenizer_eos_id": (c_int32, [c_void_p]),
    "gp_tokenizer_pad_id": (c_int32, [c_void_p]),
    "gp_tokenizer_is_special": (c_int, [c_void_p, c_int32]),
    "gp_free": (None, [c_void_p]),
    "gp_model_default_params": (GpModelParams, []),
    "gp_model_load": (c_int, [c_char_p, POINTER(GpModelParams), POINTER(c_void_p)]),
    "gp_model_free": (None, [c_void_p]),
    "gp_model_arch": (c_char_p, [c_void_p]),
    "gp_model_n_vocab": (c_int32, [c_void_p]),
    "gp_model_n_layers": (c_int32, [c_void_p]),
    "gp_model_n_embd": (c_int32, [c_void_p]),
    "gp_model_n_ctx_train": (c_int32, [c_void_p]),
    "gp_model_eos_ids": (c_int32, [c_void_p, i32p, c_int32]),
    "gp_model_bos_id": (c_int32, [c_void_p]),
    "gp_model_tokenizer": (c_void_p, [c_void_p]),
    "gp_ctx_default_params": (GpCtxParams, []),
    "gp_ctx_init": (c_int, [c_void_p, POINTER(GpCtxParams), POINTER(c_void_p)]),
    "gp_ctx_free": (None, [c_void_p]),
    "gp_ctx_reset": (None, [c_void_p]),
    "gp_ctx_n_past": (c_int32, [c_void_p]),
    "gp_ctx_memory": (c_int, [c_void_p, POINTER(GpMemInfo)]),
    "gp_ctx_tokens": (i32p, [c_void_p, i32p]),
    "gp_ctx_trim": (c_int, [c_void_p, c_int32]),
    "gp_ctx_cache_save": (c_int, [c_void_p, c_char_p]),
    "gp_ctx_cache_load": (c_int, [c_void_p, c_char_p]),
    "gp_ctx_eval": (c_int, [c_void_p, i32p, c_int32, POINTER(GpEvalOpts), f32p]),
    "gp_ctx_steer_add": (c_int, [c_void_p, POINTER(GpSteerHook)]),
    "gp_ctx_steer_clear": (None, [c_void_p]),
    "gp_ctx_logit_bias_vector": (c_int, [c_void_p, f32p, c_float]),
    "gp_steer_vector_load": (c_int, [c_char_p, POINTER(f32p), i32p]),
    "gp_gen_config_validate": (c_int, [POINTER(GpGenConfig), c_int32]),
    "gp_finish_reason_str": (c_char_p, [c_int]),
    "gp_generate": (c_int, [c_void_p, i32p, c_int32, POINTER(GpGenConfig), TOKEN_CB, c_void_p,
                            POINTER(GpGenResultBuf)]),
    "gp_gen_result_free": (None, [POINTER(GpGenResultBuf)]),
    "gp_chat_template_load": (c_int, [c_char_p, POINTER(c_void_p)]),
    "gp_chat_template_free": (None, [c_void_p]),
    "gp_chat_opts_default": (GpChatOpts, []),
    "gp_chat_template_render": (c_int, [c_void_p, POINTER(GpChatOpts), POINTER(ctypes.POINTER(ctypes.c_char)),
                                        POINTER(c_size_t)]),
    "gp_chat_parse_reply": (c_int, [ctypes.c_char_p, c_size_t, POINTER(ctypes.POINTER(ctypes.c_char))]),
    "gp_adapter_load": (c_int, [c_void_p, c_char_p, POINTER(c_void_p)]),
    "gp_adapter_free": (None, [c_void_p]),
    "gp_adapter_rank": (c_int32, [c_void_p]),
    "gp_adapter_n_targets": (c_int32, [c_void_p]),
    "gp_adapter_scale": (c_float, [c_void_p]),
    "gp_ctx_set_adapters": (c_int, [c_void_p, POINTER(c_void_p), POINTER(c_float), c_int32]),
}

# Optional functions (name -> (restype, argtypes)): bound when the library has them.
_OPTIONAL: dict = {}


def _candidates() -> list[Path]:
    env = os.environ.get("GENPARITY_LIB")
    here = Path(__file__).resolve().parent
    out = [Path(env)] if env else []
    out.append(here.parent.parent / "build" / "libgenparity.so")  # PYTHONPATH=python from a built checkout
    out.append(here / "libgenparity.so")                          # pip install puts it into the package
    return out


def _load() -> ctypes.CDLL:
    tried = []
    for p in _candidates():
        if p.is_file():
            lib = ctypes.CDLL(str(p))
            break
        tried.append(str(p))
    else:
        raise ImportError("genparity: libgenparity.so not found (tried %s); run `make` in the checkout or set "
                          "GENPARITY_LIB" % ", ".join(tried))
    for name, (res, args) in _SIGS.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    # Struct-returning default getters are called with a spare-tailed buffer type (see GpGenConfigBuf).
    for name in ("gp_gen_config_default", "gp_model_gen_config"):
        f = getattr(lib, name)
        f.restype = GpGenConfigBuf
        f.argtypes = [] if name == "gp_gen_config_default" else [c_void_p]
    for name, (res, args) in _OPTIONAL.items():
        f = getattr(lib, name, None)
        if f is not None:
            f.restype, f.argtypes = res, args
    return lib


lib: ctypes.CDLL = _load()
LIB_PATH: Optional[str] = getattr(lib, "_name", None)
