"""genparity — Python bindings of libgenparity (ctypes over the public C API of include/genparity.h).

The entry points have mlx-lm's shape; generation knobs keep transformers' names:

    import genparity
    model, tokenizer = genparity.load("models/shakespeare-llama")
    text = genparity.generate(model, tokenizer, "ROMEO:", max_tokens=32, temperature=0)
    for r in genparity.stream_generate(model, tokenizer, "ROMEO:", max_tokens=8):
        print(r.text, r.token, r.logprobs.shape, r.finish_reason)
"""
from ._core import (Adapter, GenparityError, Model, PromptCache, SteeringHook, Tokenizer, parse_chat_reply,
                    steering_vector_load)
from ._ffi import LIB_PATH, lib as _lib
from .generate import (GenerationResponse, generate, generate_ids, load, load_prompt_cache, make_prompt_cache,
                       save_prompt_cache, stream_generate)

__version__ = _lib.gp_version().decode()

__all__ = ["Adapter", "load", "generate", "stream_generate", "generate_ids", "make_prompt_cache", "save_prompt_cache",
           "load_prompt_cache", "GenerationResponse", "GenparityError", "Model", "Tokenizer", "PromptCache",
           "SteeringHook", "steering_vector_load", "parse_chat_reply", "LIB_PATH", "__version__"]
