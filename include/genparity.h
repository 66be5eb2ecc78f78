/*
 * genparity.h — the whole public API of genparity, and its manual.
 *
 * genparity loads Hugging Face decoder checkpoints (Llama, Mistral, Qwen2/3, Gemma 2/3) and generates text with
 * the same numbers as transformers' generate().  Nothing outside this header is API.
 *
 * Conventions
 *   - Every fallible call returns a gp_status; GP_OK is 0.  On failure the message (naming the file and the
 *     field at fault) is kept thread-locally and read with gp_errmsg() until the next failing call on the thread.
 *   - Handles are opaque.  Every _init/_load has a _free; freeing NULL is a no-op.
 *   - NULL handles (one rule for every function): a fallible call given a NULL handle, or a NULL pointer it needs,
 *     returns GP_ERR_INVALID_ARG; a getter given a NULL handle returns a neutral value and never crashes: 0 for
 *     counts and sizes, -1 for ids, NULL for pointers (gp_logits_kl: NAN); a void call on NULL does nothing.
 *   - Ownership is stated on each function: "borrowed" pointers stay owned by the handle and live as long as it;
 *     "caller frees" results are released with the named function.
 *   - gp_model is immutable after load and may be shared by any number of threads and contexts, each thread
 *     using its own gp_ctx; results do not depend on how many contexts run at once (checked under ThreadSanitizer
 *     by `make tsan`).  gp_ctx (KV cache, scratch, hooks) belongs to one thread at a time.
 *   - Files are opened without blocking: a FIFO, socket, device or directory given as a path is refused with
 *     GP_ERR_IO before any read.
 *   - The library never exits, aborts or prints.
 *   - Enums are append-only; params structs come from gp_*_default_params() so new fields get defaults.
 *
 * Minimal use
 *   gp_model *m; gp_ctx *c; gp_gen_result r;
 *   if (gp_model_load("models/shakespeare-llama", NULL, &m) != GP_OK) { fprintf(stderr, "%s\n", gp_errmsg()); }
 *   gp_ctx_init(m, NULL, &c);
 *   gp_gen_config g = gp_model_gen_config(m);   // transformers' defaults < generation_config.json
 *   g.max_new_tokens = 64; g.do_sample = 0;
 *   gp_generate(c, ids, n_ids, &g, NULL, NULL, &r);
 *   gp_gen_result_free(&r); gp_ctx_free(c); gp_model_free(m);
 */
#ifndef GENPARITY_H
#define GENPARITY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GP_VERSION_MAJOR 0
#define GP_VERSION_MINOR 1
#define GP_VERSION_PATCH 0

/* ------------------------------------------------------------------------------------------------------------ */
/* Status and errors                                                                                              */
/* ------------------------------------------------------------------------------------------------------------ */

typedef enum gp_status {
    GP_OK = 0,
    GP_ERR_INVALID_ARG = 1, /* a caller's argument is NULL, negative or out of range */
    GP_ERR_IO = 2,          /* a file could not be opened, read, mapped or written */
    GP_ERR_FORMAT = 3,      /* a file is malformed (bad JSON, bad safetensors header, inconsistent sizes) */
    GP_ERR_UNSUPPORTED = 4, /* a valid input that genparity does not handle (architecture, tokenizer type) */
    GP_ERR_NOMEM = 5,       /* an allocation failed or a size overflowed */
    GP_ERR_MISSING = 6,     /* a required file, tensor or field is absent */
    GP_ERR_RANGE = 7,       /* a value (token id, position, context length) is outside its valid range */
    GP_ERR_STATE = 8,       /* the call is not valid in the handle's current state */
    GP_ERR_CANCELLED = 9,   /* a callback asked to stop */
    GP_ERR_TEMPLATE = 10,   /* a chat template failed while rendering; for raise_exception() the message is its text */
    GP_ERR_DEVICE = 11      /* the compute device failed while running (a CUDA error); the message names it */
} gp_status;

/* Returns a static, human-readable name for a status ("GP_ERR_FORMAT"). Never NULL. */
const char *gp_status_str(gp_status s);

/* Returns the message of the last failing call on this thread ("" if none); borrowed, valid until the next call
 * that fails on this thread. */
const char *gp_errmsg(void);

/* Returns the library version as "MAJOR.MINOR.PATCH"; static string. */
const char *gp_version(void);

/* Where a context's forward pass runs (gp_ctx_params.device). */
typedef enum gp_device {
    GP_DEVICE_CPU = 0, /* the CPU backend (always built) */
    GP_DEVICE_CUDA = 1 /* the CUDA backend: a build with `make cuda` and an NVIDIA GPU (device 0) */
} gp_device;

/* Returns the compute backends built into this library, space-separated: "cpu" or "cpu cuda"; static string. */
const char *gp_backends(void);

/* Measures a device's copy bandwidth into *bytes_per_s: the best of 5 copies of a buffer of mib MiB (1..16384) into
 * another, bytes read + written per second.  GP_DEVICE_CUDA only (GP_ERR_UNSUPPORTED for another device, a build
 * without CUDA or no usable GPU); the call holds 2 x mib MiB of device memory while it runs. */
gp_status gp_device_copy_bandwidth(int32_t device, uint32_t mib, double *bytes_per_s);

/* ------------------------------------------------------------------------------------------------------------ */
/* Tokenizer (tokenizer.json + tokenizer_config.json)                                                             */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct gp_tokenizer gp_tokenizer;

/* Loads a tokenizer from a tokenizer.json file; tokenizer_config.json beside it is read if present.
 * Returns GP_OK and *out (caller frees with gp_tokenizer_free), or an error and *out = NULL. */
gp_status gp_tokenizer_load(const char *tokenizer_json_path, gp_tokenizer **out);

/* Loads DIR/tokenizer.json (+ DIR/tokenizer_config.json if present). Same contract as gp_tokenizer_load. */
gp_status gp_tokenizer_load_dir(const char *dir, gp_tokenizer **out);

/* Frees a tokenizer; NULL is a no-op. Must not be called on the tokenizer borrowed from a gp_model. */
void gp_tokenizer_free(gp_tokenizer *tok);

/* Encodes UTF-8 text (len bytes, NUL allowed) into ids, like transformers' tokenizer(text,
 * add_special_tokens=add_special); invalid UTF-8 first becomes one U+FFFD per maximal invalid subsequence (Python's
 * decode('utf-8', 'replace')).  Returns GP_OK and *ids (caller frees with gp_free) with *n_ids entries. */
gp_status gp_tokenizer_encode(const gp_tokenizer *tok, const char *text, size_t len, int add_special,
                              int32_t **ids, int32_t *n_ids);

/* Decodes ids into UTF-8 text like transformers' decode(ids, skip_special_tokens=skip_special).  Byte-level ids
 * that end mid-character decode to one U+FFFD at the end; an incomplete <0xNN> byte-fallback run becomes one U+FFFD
 * per byte (tokenizers' ByteFallback).  Ids >= n_vocab (a model's padded vocab_size) decode to "" like tokenizers'
 * decode.  Returns GP_OK and *text (NUL-terminated, caller frees with gp_free) of *len bytes, or GP_ERR_RANGE for a
 * negative id. */
gp_status gp_tokenizer_decode(const gp_tokenizer *tok, const int32_t *ids, int32_t n_ids, int skip_special,
                              char **text, size_t *len);

/* Returns the number of ids (vocabulary plus added tokens); 0 for NULL. */
int32_t gp_tokenizer_n_vocab(const gp_tokenizer *tok);

/* Returns the id of a token string, or -1 if it is not in the vocabulary. */
int32_t gp_tokenizer_token_to_id(const gp_tokenizer *tok, const char *token);

/* Returns the stored string of an id (borrowed), or NULL if out of range. */
const char *gp_tokenizer_id_to_token(const gp_tokenizer *tok, int32_t id);

/* Returns the BOS / EOS / PAD id from tokenizer_config.json (or the vocabulary), or -1 when absent. */
int32_t gp_tokenizer_bos_id(const gp_tokenizer *tok);
int32_t gp_tokenizer_eos_id(const gp_tokenizer *tok);
int32_t gp_tokenizer_pad_id(const gp_tokenizer *tok);

/* Returns 1 if id is a special (added, special=true) token, else 0. */
int gp_tokenizer_is_special(const gp_tokenizer *tok, int32_t id);

/* Streaming detokenizer: feed ids one at a time, get text pieces that never split a UTF-8 character or a
 * SentencePiece space; the concatenation of all pieces (plus gp_detok_flush) equals gp_tokenizer_decode of all
 * ids. */
typedef struct gp_detok gp_detok;

/* Creates a streaming detokenizer over tok (borrowed; must outlive it). Returns GP_OK and *out (caller frees
 * with gp_detok_free). */
gp_status gp_detok_init(const gp_tokenizer *tok, int skip_special, gp_detok **out);

/* Frees a streaming detokenizer; NULL is a no-op. */
void gp_detok_free(gp_detok *d);

/* Adds one id; *piece receives the newly final text (borrowed, valid until the next call on d, may be "").
 * Ids >= n_vocab add nothing (as in gp_tokenizer_decode).  Returns GP_OK, or GP_ERR_RANGE for a negative id. */
gp_status gp_detok_push(gp_detok *d, int32_t id, const char **piece);

/* Returns in *piece whatever text is still held back (borrowed, valid until the next call on d). */
gp_status gp_detok_flush(gp_detok *d, const char **piece);

/* Returns the length in bytes of the piece last returned by gp_detok_push / gp_detok_flush (a piece may hold NUL
 * bytes, e.g. from a <0x00> byte token, so strlen can stop early); 0 for NULL. */
size_t gp_detok_piece_len(const gp_detok *d);

/* Frees memory returned by genparity with "caller frees with gp_free"; NULL is a no-op. */
void gp_free(void *p);

/* ------------------------------------------------------------------------------------------------------------ */
/* Model                                                                                                          */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct gp_model gp_model;

typedef struct gp_model_params {
    int32_t load_tokenizer; /* 1 (default): load DIR/tokenizer.json if present; 0: skip it */
    void (*progress)(float fraction, void *user_data); /* optional: called during load with 0..1 */
    void *progress_user_data;
} gp_model_params;

/* Returns the default model params. */
gp_model_params gp_model_default_params(void);

/* Loads a Hugging Face model folder (config.json, generation_config.json, model.safetensors or sharded
 * model-*.safetensors + model.safetensors.index.json, tokenizer files).  Weights are memory-mapped and kept in
 * their stored dtype.  params may be NULL.  Returns GP_OK and *out (caller frees with gp_model_free). */
gp_status gp_model_load(const char *dir, const gp_model_params *params, gp_model **out);

/* Resolves a model name to a folder, offline (nothing is downloaded): an existing folder (relative, absolute or
 * "~/..."; mlx-lm's load(path)) or an explicit path ("/...", "./...", "../...") is returned as is; "org/name[@revision]" is looked up in the Hugging Face hub cache
 * ($HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub, in
 * that order): models--org--name/snapshots/<commit>/, where <commit> is read from refs/<revision> (default "main") or
 * is the revision itself.  Returns GP_OK and *dir (caller frees with gp_free), or GP_ERR_MISSING with a message
 * listing every place it looked. */
gp_status gp_model_resolve(const char *name, char **dir);

/* Frees a model and unmaps its files; NULL is a no-op.  Every gp_ctx of the model must be freed first. */
void gp_model_free(gp_model *m);

/* Settings of gp_model_quantize. */
typedef struct gp_quantize_params {
    int32_t bits;       /* 2, 3, 4, 5, 6 or 8 */
    int32_t group_size; /* 32, 64 or 128 */
    void (*progress)(float fraction, void *user_data); /* may be NULL; called after each tensor */
    void *progress_user_data;
} gp_quantize_params;

/* Writes an MLX-quantized copy of the model folder dir into out_dir (created; must not hold a model already), as
 * mlx_lm.convert -q does: every linear and embedding whose input size the group divides becomes uint32 weight +
 * scales + biases (in the weight's dtype) with mlx.core.quantize's arithmetic, other tensors are copied, config.json
 * gains "quantization" and "quantization_config", the tokenizer and generation files are copied.  Streamed: one
 * tensor in memory at a time.  Returns GP_OK or an error naming the file and field. */
gp_status gp_model_quantize(const char *dir, const char *out_dir, const gp_quantize_params *p);

/* Returns the architecture name from config.json ("Qwen3ForCausalLM"); borrowed. */
const char *gp_model_arch(const gp_model *m);

/* Shape queries: vocabulary size, number of decoder layers, hidden size, maximum positions. */
int32_t gp_model_n_vocab(const gp_model *m);
int32_t gp_model_n_layers(const gp_model *m);
int32_t gp_model_n_embd(const gp_model *m);
int32_t gp_model_n_ctx_train(const gp_model *m);

/* Returns the number of EOS ids (generation_config.json, else config.json) and writes up to cap of them to ids. */
int32_t gp_model_eos_ids(const gp_model *m, int32_t *ids, int32_t cap);

/* Returns the BOS id from generation_config.json / config.json, or -1. */
int32_t gp_model_bos_id(const gp_model *m);

/* Returns the model's tokenizer (borrowed, owned by the model), or NULL if the folder has none. */
const gp_tokenizer *gp_model_tokenizer(const gp_model *m);

/* Returns the total bytes of the mapped weight tensors. */
uint64_t gp_model_weight_bytes(const gp_model *m);

/* Returns the bytes of weights one decoded token reads: every layer's tensors, the final norm, the whole lm_head
 * (the embedding table when tied) and one embedding row.  KV-cache reads are not included. */
uint64_t gp_model_decode_bytes(const gp_model *m);

/* Pins the model's memory-mapped weights in RAM (mlock), so that they are never paged out.  Returns GP_OK, or
 * GP_ERR_UNSUPPORTED (nothing pinned) when RLIMIT_MEMLOCK or the system does not allow it; the message gives the bytes
 * needed and the limit.  The pages stay pinned until gp_model_free. */
gp_status gp_model_mlock(const gp_model *m);

/* Returns the process's peak resident set in bytes since it started or since the last gp_mem_peak_reset (Linux:
 * VmHWM of /proc/self/status; elsewhere getrusage's peak), 0 if unknown. */
uint64_t gp_mem_peak_rss(void);

/* Resets the process's peak resident set to its current resident set (Linux /proc/self/clear_refs), so the next
 * gp_mem_peak_rss measures one run.  Returns GP_OK or GP_ERR_UNSUPPORTED where the system cannot. */
gp_status gp_mem_peak_reset(void);

/* Returns the CPU kernel path in use: "avx512", "avx2" or "scalar" (static string).  Chosen once from the CPU's
 * features; the environment variable GENPARITY_SIMD=scalar|avx2|avx512 forces a path the CPU supports. */
const char *gp_cpu_simd(void);

/* Returns 1 when the bf16 compute mode (GP_COMPUTE_BF16) multiplies bf16 weights with the CPU's bf16 dot products
 * (AVX512_BF16 vdpbf16ps, on the avx512 path; same bits as the float32 kernels), else 0. */
int gp_cpu_bf16_dot(void);

/* ------------------------------------------------------------------------------------------------------------ */
/* Context: KV cache + scratch                                                                                    */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct gp_ctx gp_ctx;

typedef struct gp_ctx_params {
    int32_t n_ctx;         /* maximum positions in the cache; 0 (default): the model's max_position_embeddings */
    int32_t n_threads;     /* worker threads; 0 (default): all online CPUs */
    int32_t prefill_chunk; /* tokens per batched prefill forward; default 512. Results do not depend on it. */
    /* KV cache kind (every cache of the context) */
    int32_t max_kv_size;   /* 0 (default): unbounded up to n_ctx; N > 0: rotating cache of N positions per layer
                              (mlx-lm's RotatingKVCache): position p attends to the first `keep` positions and the
                              most recent N - keep positions up to p; memory stays bounded however long the run */
    int32_t keep;          /* rotating: positions never evicted; -1 (default): mlx-lm's 4 (at most max_kv_size - 1)
                              with a rotating cache, else 0; an explicit keep > 0 needs max_kv_size > 0 */
    int32_t kv_bits;       /* 0 (default): float32 rows, or bfloat16 rows with GP_COMPUTE_BF16;
                              16: bfloat16 rows, half the bytes (GP_COMPUTE_BF16 rounds keys and values to bfloat16
                              before they are stored: the same logits; GP_COMPUTE_F32 rounds them when stored);
                              32: float32 rows; 4 or 8: affine-quantized rows */
    int32_t kv_group_size; /* quantization group along a position's [n_kv_heads * head_dim] row: 32, 64 (default),
                              128; the last group of a row may be shorter */
    int32_t quantized_kv_start; /* positions before this stay float32 (default 0) */
    uint64_t mem_limit_bytes;   /* 0 (default): none; else a prefill that would grow the caches past this many
                                   bytes is refused with GP_ERR_NOMEM before any work */
    int32_t device;        /* gp_device (default GP_DEVICE_CPU).  GP_DEVICE_CUDA: the model's weights are uploaded
                              once (at the first such context) and this context's KV cache and scratch live on the
                              GPU; gp_ctx_init fails with GP_ERR_UNSUPPORTED and the reason when the library has no
                              CUDA backend or no GPU/driver is usable, GP_ERR_NOMEM when the model does not fit */
    int32_t compute;       /* gp_compute (default GP_COMPUTE_F32) */
} gp_ctx_params;

/* Compute modes of a context (append-only). */
typedef enum gp_compute {
    GP_COMPUTE_F32 = 0,  /* float32 activations everywhere (default): transformers' float32 numbers */
    GP_COMPUTE_BF16 = 1  /* activations rounded to bfloat16 where transformers' bf16 forward (eager, CPU) rounds
                            them: every linear's output, the residual stream, norms' outputs, rope, attention scores
                            and probabilities, the MLP activation; float32 accumulation, float32 where torch upcasts
                            (RMSNorm variance, softmax).  On CUDA the same roundings, attention as sdpa's
                            (float32 scores and softmax, probabilities rounded for p·v). */
} gp_compute;

/* Returns the default context params. */
gp_ctx_params gp_ctx_default_params(void);

/* Creates a context for m (borrowed; must outlive the context).  params may be NULL.  Returns GP_OK and *out
 * (caller frees with gp_ctx_free). */
gp_status gp_ctx_init(const gp_model *m, const gp_ctx_params *params, gp_ctx **out);

/* Frees a context; NULL is a no-op. */
void gp_ctx_free(gp_ctx *c);

/* Empties the KV cache (position back to 0). */
void gp_ctx_reset(gp_ctx *c);

/* Returns the number of positions currently in the KV cache. */
int32_t gp_ctx_n_past(const gp_ctx *c);

/* Returns the bytes held by the context's KV caches (all named caches; shared fork buffers counted once per cache). */
uint64_t gp_ctx_kv_bytes(const gp_ctx *c);

/* Memory accounting. */
typedef struct gp_mem_info {
    uint64_t weight_bytes;   /* mapped weight tensors */
    uint64_t kv_bytes;       /* every cache of the context */
    uint64_t scratch_bytes;  /* the context's activation buffers */
    uint64_t peak_rss_bytes; /* the process's peak resident set */
} gp_mem_info;

/* Fills *info. Returns GP_OK. */
gp_status gp_ctx_memory(const gp_ctx *c, gp_mem_info *info);

/* Returns the token ids held by the current cache (borrowed, valid until the next call that changes the cache) and
 * their count in *n. */
const int32_t *gp_ctx_tokens(const gp_ctx *c, int32_t *n);

/* Keeps the first n positions of the current cache.  Returns GP_OK, GP_ERR_RANGE, or GP_ERR_STATE when a rotating or
 * sliding ring has already evicted what position n would attend to (the cache is then unchanged). */
gp_status gp_ctx_trim(gp_ctx *c, int32_t n);

/* Starts a request: resets the steering step to 0, keeps the longest prefix the current cache shares with ids (at least
 * one token is always evaluated; nothing is reused when the cache was computed under other steering hooks or a hook
 * varies by step), evaluates the rest and writes the last position's logits [n_vocab] (may be NULL).  *n_reused (may
 * be NULL) receives the positions reused.  Falls back to a full prefill when the cache cannot be trimmed. */
gp_status gp_ctx_prefill(gp_ctx *c, const int32_t *ids, int32_t n, float *logits, int32_t *n_reused);

/* Named caches ("isolated caches"): a context starts with one cache named "default". */

/* Makes cache `name` current, creating it empty if absent. Returns GP_OK or GP_ERR_NOMEM. */
gp_status gp_ctx_cache_select(gp_ctx *c, const char *name);

/* Copies cache src into a new cache dst (copy-on-write: buffers are shared until one side writes). */
gp_status gp_ctx_cache_fork(gp_ctx *c, const char *src, const char *dst);

/* Deletes cache name (not the current one). Returns GP_OK, GP_ERR_MISSING or GP_ERR_STATE. */
gp_status gp_ctx_cache_drop(gp_ctx *c, const char *name);

/* Returns the current cache's name (borrowed); NULL for a NULL ctx. */
const char *gp_ctx_cache_name(const gp_ctx *c);

/* Saves the current cache to a safetensors file whose metadata describes it: model fingerprint (config + weights
 * hash), tokenizer hash, token ids, cache kind and parameters, steering hooks. Returns GP_OK or GP_ERR_IO. */
gp_status gp_ctx_cache_save(gp_ctx *c, const char *path);

/* Loads a cache file into the current cache.  A file of another model, another cache kind, a wrong version, a
 * truncated file or more positions than n_ctx is refused with a message and the context is left as it was. */
gp_status gp_ctx_cache_load(gp_ctx *c, const char *path);

/* Returns the model the context was created for (borrowed). */
const gp_model *gp_ctx_model(const gp_ctx *c);

/* Options of gp_ctx_eval. Zero-initialise, then set what you need. */
typedef struct gp_eval_opts {
    int32_t all_logits;           /* 0: logits of the last token only, [n_vocab]; 1: every token, [n, n_vocab] */
    const int32_t *hidden_layers; /* hidden states to capture, transformers' output_hidden_states indices:
                                     0 = embeddings (scaled for Gemma), i = output of decoder layer i-1,
                                     n_layers = final norm of the last layer's output */
    int32_t n_hidden_layers;
    float *hidden_out;            /* caller's buffer [n_hidden_layers, n, n_embd], filled in that order */
} gp_eval_opts;

/* Runs n tokens through the model at positions n_past.. n_past+n-1, appends their keys/values to the cache and
 * writes float32 logits to logits (caller's buffer; [n_vocab], or [n, n_vocab] with all_logits; may be NULL).
 * opts may be NULL.  Prefill is batched in chunks of prefill_chunk.  Returns GP_OK, or GP_ERR_RANGE for an id
 * outside the vocabulary or a cache overflow (the cache is then unchanged). */
gp_status gp_ctx_eval(gp_ctx *c, const int32_t *ids, int32_t n, const gp_eval_opts *opts, float *logits);

/* Returns a buffer of n_vocab floats owned by c (valid until gp_ctx_free; NULL for a NULL c).  Passed to gp_ctx_eval
 * as logits (last token only), it receives them at the device's full transfer rate: pinned host memory with
 * --device cuda, where a caller's own buffer is written through a staging copy. */
float *gp_ctx_logits_buffer(gp_ctx *c);

/* ------------------------------------------------------------------------------------------------------------ */
/* Steering: residual injection and logit bias W·v                                                               */
/* ------------------------------------------------------------------------------------------------------------ */

/* How a hook's coefficient a evolves with the forward step s (s = 0 is the first gp_ctx_eval after gp_ctx_reset,
 * i.e. the prefill of the whole prompt; s = 1 the first one-token decode step, ...). */
typedef enum gp_steer_schedule {
    GP_STEER_CONSTANT = 0, /* a = alpha */
    GP_STEER_RAMP = 1,     /* a = alpha * min(1, (s + 1) / steps) */
    GP_STEER_WARMUP = 2,   /* a = 0 while s < steps, then alpha (leave the first `steps` forwards unsteered) */
    GP_STEER_CALLBACK = 3  /* a = fn(s, user_data) */
} gp_steer_schedule;

typedef struct gp_steer_hook {
    int32_t layer;           /* 0-based decoder layer whose output (the residual stream after it) gets a * vector */
    const float *vector;     /* [n_embd]; copied by gp_ctx_steer_add */
    float alpha;
    gp_steer_schedule schedule;
    int32_t steps;           /* RAMP / WARMUP length in forward steps (>= 1) */
    float (*fn)(int32_t step, void *user_data); /* CALLBACK schedule */
    void *user_data;
} gp_steer_hook;

/* Adds a residual-injection hook to the context: a * vector is added to the output of decoder layer `layer` at every
 * position that later gp_ctx_eval calls run (prompt included), like a PyTorch forward hook on that layer.  Several
 * hooks may be active, on the same or different layers; they add up.  Returns GP_OK or GP_ERR_RANGE/INVALID_ARG. */
gp_status gp_ctx_steer_add(gp_ctx *c, const gp_steer_hook *hook);

/* Removes every residual-injection hook and the logit-bias vector. */
void gp_ctx_steer_clear(gp_ctx *c);

/* Sets alpha * (output-embedding matrix @ vector [n_embd]) as a bias added to every logit gp_ctx_eval returns
 * (after final soft-capping, before any logits processor), using the untied lm_head or the tied embedding.
 * vector NULL clears it.  Returns GP_OK or GP_ERR_NOMEM. */
gp_status gp_ctx_logit_bias_vector(gp_ctx *c, const float *vector, float alpha);

/* Loads a steering vector: "FILE.safetensors:TENSOR" (any float dtype; "FILE.safetensors" alone if it holds one
 * tensor), a NumPy .npy (float32/float64, little-endian, 1-D or [1, n]) or a raw little-endian float32 file.
 * Returns GP_OK and *vec (caller frees with gp_free) of *n floats. */
gp_status gp_steer_vector_load(const char *spec, float **vec, int32_t *n);

/* ---- LoRA adapters (applied unfused: every targeted linear adds scale * (x A^T) B^T to its output) ---- */

typedef struct gp_adapter gp_adapter; /* a loaded adapter: immutable, shareable by every context of its model */

/* Loads the LoRA adapter in folder dir for model m: mlx-lm's layout (adapters.safetensors with ...lora_a [in, r] /
 * ...lora_b [r, out], adapter_config.json with fine_tune_type, num_layers, lora_parameters {rank, scale, keys}) or
 * PEFT's (adapter_model.safetensors with ...lora_A.weight [r, in] / ...lora_B.weight [out, r], adapter_config.json
 * with r, lora_alpha, use_rslora, target_modules, layers_to_transform).  Any base format works (bf16, quantized).
 * An adapter for another model (shapes, modules that do not exist), DoRA, trained biases, modules_to_save or
 * per-module rank/alpha patterns are errors naming the file and field; nothing is applied partially.  Returns
 * GP_OK and *out (free with gp_adapter_free, after every context using it has dropped it; it must not outlive m). */
gp_status gp_adapter_load(const gp_model *m, const char *dir, gp_adapter **out);

/* Frees an adapter; NULL is a no-op. */
void gp_adapter_free(gp_adapter *a);

/* Rank r of the adapter's terms, number of targeted linears, its scale (mlx-lm scale, or PEFT's lora_alpha / r, or
 * lora_alpha / sqrt(r) with use_rslora) and a 64-bit identity (hash of its files): what caches record. */
int32_t gp_adapter_rank(const gp_adapter *a);
int32_t gp_adapter_n_targets(const gp_adapter *a);
float gp_adapter_scale(const gp_adapter *a);
uint64_t gp_adapter_id(const gp_adapter *a);

/* Makes adapters[0..n) (each of c's model, each multiplied by scales[i], scales NULL = 1) the context's adapters,
 * replacing the previous set; n = 0 removes them.  The model is not touched: other contexts keep theirs.  The
 * context keeps the pointers (the adapters must stay loaded while set).  When the set changes, positions already in
 * the caches were computed under the old set: they are never reused for a new prompt (gp_generate / prefix reuse),
 * and a cache file records the set it was built with.  Returns GP_OK, GP_ERR_INVALID_ARG (an adapter of another
 * model, n < 0 or > 16) or GP_ERR_NOMEM; on error the context keeps its previous set. */
gp_status gp_ctx_set_adapters(gp_ctx *c, gp_adapter *const *adapters, const float *scales, int32_t n);

/* Writes model m with adapters[0..n) (scales NULL = 1) merged into its weights to out_dir (created; must not hold a
 * model), as mlx_lm.fuse does: W' = W + (scale * B A) cast to W's dtype, added in that dtype; a quantized linear is
 * dequantized (as mx.dequantize), merged and quantized again with its bits and group size, or with dequantize != 0
 * every quantized tensor is written dense in its scales' dtype and config.json loses "quantization".  Other
 * tensors and files are copied.  Returns GP_OK or an error naming the file. */
gp_status gp_model_fuse(const gp_model *m, gp_adapter *const *adapters, const float *scales, int32_t n,
                        const char *out_dir, int dequantize);

/* Suspect-line heuristics of the steering validation harness (`genparity validate`): flags of gp_text_suspect. */
#define GP_SUSPECT_DIGIT_RUN 1u    /* a run of 8 or more consecutive digits */
#define GP_SUSPECT_LATEX 2u        /* LaTeX-like markup: \begin{ or \frac, or two or more \word commands, or ^{ / _{ */
#define GP_SUSPECT_BRACES 4u       /* (), [] or {} unbalanced: a closer without its opener, or 2+ left open */
#define GP_SUSPECT_NONPRINT 8u     /* control characters (other than tab), U+FFFD, or invalid UTF-8 */
#define GP_SUSPECT_REPETITION 16u  /* degenerate repetition: one word 4+ times in a row, a 1-8 character unit
                                      repeated 6+ times in a row, or under 30% distinct words in a 10+ word line */

/* Returns the GP_SUSPECT_* flags of one line of generated text (0 = looks normal). */
uint32_t gp_text_suspect(const char *line, size_t len);

/* ------------------------------------------------------------------------------------------------------------ */
/* Generation                                                                                                     */
/* ------------------------------------------------------------------------------------------------------------ */

#define GP_MAX_EOS 8

/* A token sequence borrowed from the caller (bad_words_ids entries). */
typedef struct gp_token_seq {
    const int32_t *ids;
    int32_t n;
} gp_token_seq;

/* transformers' sequence_bias entry: bias is added to ids[n-1] when the sequence ends with ids[0..n-2]
 * (always, when n == 1). */
typedef struct gp_seq_bias {
    const int32_t *ids;
    int32_t n;
    double bias;
} gp_seq_bias;

/* One entry of the (non-transformers) logit_bias map: scores[id] += bias. */
typedef struct gp_token_bias {
    int32_t id;
    double bias;
} gp_token_bias;

/* Caller logits processor: runs after genparity's processors and before the sampling warpers (temperature, top-k,
 * ...), like transformers' logits_processor= argument.  ids: prompt + generated so far (borrowed); scores:
 * float32 [n_vocab], modified in place.  Return GP_OK, or an error status to stop generation with it. */
typedef gp_status (*gp_logits_proc_fn)(const int32_t *ids, int32_t n_ids, float *scores, int32_t n_vocab,
                                       void *user_data);

typedef struct gp_logits_processor {
    gp_logits_proc_fn fn;
    void *user_data;
} gp_logits_processor;

/* Caller sampler: replaces the built-in choice (argmax / multinomial).  scores: the fully processed float32
 * scores [n_vocab] (warpers applied when do_sample); u: a uniform draw in [0, 1) from the seeded generator, one
 * per step, so a sampler can stay deterministic.  Writes the chosen id to *token (0 <= id < n_vocab). */
typedef gp_status (*gp_sampler_fn)(const float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids,
                                   double u, void *user_data, int32_t *token);

/* Every decoding knob, with transformers' names and defaults.  Get one from gp_gen_config_default() (transformers'
 * library defaults) or gp_model_gen_config() (those overridden by the model's generation_config.json), then set
 * what you need.  Pointers are borrowed: the caller keeps them alive during gp_generate (a config returned by
 * gp_model_gen_config borrows arrays owned by the model).  Floating knobs are double like Python's floats; they are
 * rounded to float32 exactly where torch rounds them.  Order of application: docs/sampling.md. */
typedef struct gp_gen_config {
    int32_t max_new_tokens;  /* default 20, like transformers; 0: no cap on new tokens (max_length, context) */
    int32_t do_sample;       /* 0: greedy (first maximum); 1: sample */
    double temperature;      /* default 1.0; applied only when sampling; must be > 0 when sampling */
    int32_t top_k;           /* default 50; 0 disables; applied only when sampling */
    double top_p;            /* default 1.0 (off); applied only when sampling */
    int32_t eos_ids[GP_MAX_EOS];
    int32_t n_eos;           /* number of valid eos_ids */
    int32_t ignore_eos;      /* 1: do not stop at EOS (EOS ids still feed min_length / min_new_tokens / bad words) */
    uint64_t seed;           /* seed of the sampler's generator (xoshiro256**, seeded through splitmix64) */

    /* --- transformers knobs (GenerationConfig names) --- */
    int32_t max_length;      /* default 0 (unset): cap on prompt + new tokens, used only when max_new_tokens == 0 */
    int32_t min_new_tokens;  /* default 0: EOS ids are masked until this many tokens were generated */
    int32_t min_length;      /* default 0: EOS ids are masked while prompt + generated < min_length */
    double min_p;            /* default 0 (off; transformers None); sampling only */
    double typical_p;        /* default 1.0 (off); sampling only */
    double epsilon_cutoff;   /* default 0 (off); sampling only */
    double eta_cutoff;       /* default 0 (off); sampling only */
    double repetition_penalty;      /* default 1.0 (off); over prompt + generated (see penalty_window) */
    int32_t no_repeat_ngram_size;   /* default 0 (off) */
    const gp_token_seq *bad_words_ids; /* default NULL; sequences that are never completed */
    int32_t n_bad_words_ids;
    const gp_seq_bias *sequence_bias;  /* default NULL */
    int32_t n_sequence_bias;
    const int32_t *suppress_tokens;    /* default NULL; always masked */
    int32_t n_suppress_tokens;
    const int32_t *begin_suppress_tokens; /* default NULL; masked at the first generated position */
    int32_t n_begin_suppress_tokens;
    int32_t forced_bos_token_id;   /* default -1 (off); forced when the sequence has length 1 */
    int32_t forced_eos_token_id;   /* default -1 (off); forced at the last position allowed by the length cap */
    const char *const *stop_strings; /* default NULL; stop when the generated text contains one (cut from text) */
    int32_t n_stop_strings;
    double max_time;               /* default 0 (off): stop after this many seconds (prefill included) */
    int32_t skip_special_tokens;   /* default 1: special tokens are left out of result text and stream pieces */

    /* --- NOT in transformers: extras from other engines, applied after transformers' processors --- */
    double frequency_penalty;      /* default 0 (OpenAI): scores[t] -= f * count(t in generated tokens) */
    double presence_penalty;       /* default 0 (OpenAI): scores[t] -= p if t occurs in the generated tokens */
    const gp_token_bias *logit_bias; /* default NULL (OpenAI logit_bias): scores[id] += bias */
    int32_t n_logit_bias;
    int32_t penalty_window;        /* default 0 (whole sequence); > 0: repetition/frequency/presence penalties look
                                      only at the last penalty_window tokens (mlx-lm repetition_context_size) */

    /* --- API hooks --- */
    const gp_logits_processor *logits_processors; /* default NULL; after the processors, before the warpers */
    int32_t n_logits_processors;
    gp_sampler_fn sampler;         /* default NULL: built-in argmax (greedy) / multinomial (do_sample) */
    void *sampler_user_data;
    int32_t logprobs;              /* default 0; 1: record the log-probability of each chosen token */
    int32_t top_logprobs;          /* default 0; N > 0: also record the N most likely ids per step (implies logprobs) */
    int32_t logprobs_raw;          /* default 0: log_softmax of the processed scores the token was chosen from
                                      (transformers' output_scores); 1: of the model's raw logits */

    void *_owned;                  /* reserved: storage owned by genparity (e.g. the model's parsed JSON arrays) */

    /* --- beam search (transformers' _beam_search; appended fields) --- */
    int32_t num_beams;             /* default 1 (no beam search); N > 1: beam search over N beams (greedy only:
                                      do_sample with num_beams > 1 is refused) */
    int32_t num_return_sequences;  /* default 1; beam search returns this many (<= num_beams), best first */
    double length_penalty;         /* default 1.0: a finished beam scores sum(logprobs) / new_length^length_penalty */
    int32_t early_stopping;        /* GP_EARLY_STOPPING_*: default FALSE (transformers' heuristic) */

    /* --- more transformers processors (appended fields; order of application: docs/sampling.md) --- */
    /* (appended fields are off when zero, so a zero-filled tail from an older caller changes nothing) */
    double encoder_repetition_penalty;   /* default 1.0; 0 or 1.0: off; decoder-only models: the prompt's ids get the
                                            repetition penalty with 1/penalty (EncoderRepetitionPenaltyLogitsProcessor) */
    int32_t encoder_no_repeat_ngram_size; /* default 0 (off); n-grams of the prompt are never completed */
    int32_t remove_invalid_values;       /* default 0; 1: NaN -> 0, +inf / -inf -> the largest / lowest float */
    int32_t exponential_decay_start;     /* exponential_decay_length_penalty (start_index, decay_factor): after
                                            start_index new tokens, EOS scores grow by |s| * (decay_factor^k - 1) */
    double exponential_decay_factor;     /* default 0: off (transformers' None); > 0: on */
    int32_t renormalize_logits;          /* default 0; 1: log_softmax after every processor and warper */
} gp_gen_config;

/* gp_gen_config.early_stopping, transformers' early_stopping: False, True, "never". */
#define GP_EARLY_STOPPING_FALSE 0 /* stop when the best running beam, at its current length, cannot beat the worst
                                     finished one */
#define GP_EARLY_STOPPING_TRUE 1  /* stop as soon as num_beams sequences are finished */
#define GP_EARLY_STOPPING_NEVER 2 /* canonical beam search: the bound uses max_length when length_penalty > 0 */

/* Returns transformers' library defaults (no EOS ids). */
gp_gen_config gp_gen_config_default(void);

/* Returns the library defaults overridden by the model's generation_config.json (EOS ids, sampling knobs).
 * Arrays in it are borrowed from the model. */
gp_gen_config gp_model_gen_config(const gp_model *m);

/* Checks a config (ranges, NULL arrays with counts) against a vocabulary of n_vocab ids (0: ids unchecked).
 * Returns GP_OK or GP_ERR_INVALID_ARG naming the field. */
gp_status gp_gen_config_validate(const gp_gen_config *g, int32_t n_vocab);

/* Returns KL(softmax(p) || softmax(q)) in nats for two logit vectors of n entries (computed in double; -inf
 * entries of p contribute nothing); 0 when n <= 0, NAN when p or q is NULL. */
double gp_logits_kl(const float *p, const float *q, int32_t n);

typedef enum gp_finish_reason {
    GP_FINISH_NONE = 0,
    GP_FINISH_STOP = 1,        /* an EOS id was generated */
    GP_FINISH_LENGTH = 2,      /* max_new_tokens / max_length reached */
    GP_FINISH_STOP_STRING = 3, /* the generated text contains a stop string (stop_index says which) */
    GP_FINISH_TIME = 4,        /* max_time elapsed */
    GP_FINISH_CANCELLED = 5,   /* the token callback asked to stop */
    GP_FINISH_CONTEXT = 6      /* the context (n_ctx) is full */
} gp_finish_reason;

/* Returns "stop", "length", "stop_string", "time", "cancelled", "context" ("none" for NONE); static string. */
const char *gp_finish_reason_str(gp_finish_reason r);

/* One alternative of a top-N logprobs list. */
typedef struct gp_top_logprob {
    int32_t id;
    float logprob;
} gp_top_logprob;

/* One sequence returned by beam search (owned by its gp_gen_result). */
typedef struct gp_gen_sequence {
    int32_t *tokens;          /* generated ids only (a final EOS included) */
    int32_t n_tokens;
    float score;              /* transformers' sequences_scores: sum of processed logprobs / length^length_penalty */
    char *text;               /* decoded text (the final EOS left out), or NULL without a tokenizer */
    size_t text_len;
    gp_finish_reason finish_reason; /* STOP (ended with EOS), LENGTH or TIME */
} gp_gen_sequence;

typedef struct gp_gen_result {
    int32_t *tokens;          /* generated ids only (EOS included when it stopped generation); gp_gen_result_free */
    int32_t n_tokens;
    gp_finish_reason finish_reason;
    int32_t n_prompt;         /* prompt tokens evaluated */
    double prompt_seconds;    /* wall time of the prefill */
    double gen_seconds;       /* wall time of the decode steps */
    char *text;               /* generated text (NUL-terminated; stop string and what follows cut; the stopping EOS
                                 left out), or NULL when the model has no tokenizer; gp_gen_result_free */
    size_t text_len;
    int32_t stop_index;       /* index into stop_strings of the match (GP_FINISH_STOP_STRING), else -1 */
    float *logprobs;          /* [n_tokens] log-probability of each chosen id, or NULL (cfg.logprobs == 0) */
    gp_top_logprob *top_logprobs; /* [n_tokens * n_top], most likely first, or NULL */
    int32_t n_top;            /* entries per step in top_logprobs (cfg.top_logprobs capped at n_vocab) */
    gp_gen_sequence *sequences;        /* beam search: [n_sequences] returned beams, best first (sequences[0] has
                                          the same tokens as `tokens`); NULL without beam search */
    int32_t n_sequences;
} gp_gen_result;


/* What the streaming callback receives for each generated id. */
typedef struct gp_token_event {
    int32_t id;               /* the generated id */
    int32_t index;            /* 0 for the first generated id */
    const char *piece;        /* text that became final with this id (borrowed, valid during the call; may be "":
                                 text that could start a stop string is held back until it cannot) */
    size_t piece_len;
    float logprob;            /* log-probability of id (as in gp_gen_result.logprobs); NAN when not requested */
    const gp_top_logprob *top; /* n_top alternatives (borrowed, valid during the call), or NULL */
    int32_t n_top;
    gp_finish_reason finish;  /* NONE, or the reason when this is the last id */
} gp_token_event;

/* Per-token callback: return 0 to continue, non-zero to stop (gp_generate then returns GP_ERR_CANCELLED and the
 * result, with finish_reason GP_FINISH_CANCELLED, is still filled). */
typedef int (*gp_token_cb)(const gp_token_event *ev, void *user_data);

/* Prefills the prompt through gp_ctx_prefill (the longest prefix the current cache shares with the prompt is reused,
 * when it was computed under the current constant steering hooks; results are identical to a fresh run) and generates until a stopping criterion (EOS, length, stop string, time,
 * full context), calling on_token (may be NULL) for every generated id.  Returns GP_OK and fills *result (caller
 * frees with gp_gen_result_free); GP_ERR_CANCELLED (result filled) when on_token asked to stop; another error
 * (result empty) when the config is invalid or evaluation fails. */
gp_status gp_generate(gp_ctx *c, const int32_t *prompt, int32_t n_prompt, const gp_gen_config *cfg,
                      gp_token_cb on_token, void *user_data, gp_gen_result *result);

/* One sequence of gp_generate_batch. */
typedef struct gp_batch_seq {
    gp_ctx *ctx;              /* the sequence's own context (one per sequence; every context of the same model) */
    const int32_t *prompt;    /* borrowed during the call */
    int32_t n_prompt;
    const gp_gen_config *cfg; /* the sequence's config (borrowed) */
    gp_token_cb on_token;     /* may be NULL; receives this sequence's ids */
    void *user_data;
} gp_batch_seq;

/* Generates n sequences together: each prompt is prefilled, then each step picks the next id of every unfinished
 * sequence and evaluates them all before the next step; sequences have their own lengths, configs and stopping
 * criteria and finish at different steps.  Every sequence's tokens, text, logprobs and logits are bit-identical to
 * gp_generate alone on its context with its config, for any batch and thread count.  results [n] (caller frees each
 * with gp_gen_result_free); status [n] (may be NULL) receives each sequence's own status.  Returns GP_OK when every
 * sequence succeeded, else the first failing sequence's status (its message names the index).  Sequences with
 * num_beams > 1 run alone, after the others. */
gp_status gp_generate_batch(const gp_batch_seq *seqs, int32_t n, gp_gen_result *results, gp_status *status);

/* Frees the arrays inside a result and zeroes it; NULL is a no-op. */
void gp_gen_result_free(gp_gen_result *r);

/* gp_generate takes the WHOLE prompt and reuses the cache only where the prompt repeats the cached tokens (a prompt
 * that does not extend them is prefilled from its first differing token: the cached context past that point is
 * dropped).  gp_generate_continue is the other, explicit choice: it APPENDS ids after every token the current cache
 * holds (the model sees cached tokens + ids; nothing cached is dropped or recomputed) and generates as gp_generate.
 * *n_cached (may be NULL) receives how many cached tokens preceded ids.  Returns as gp_generate; GP_ERR_INVALID_ARG
 * when n_ids <= 0; GP_ERR_NOMEM when cached + ids overflows. */
gp_status gp_generate_continue(gp_ctx *c, const int32_t *ids, int32_t n_ids, const gp_gen_config *cfg,
                               gp_token_cb on_token, void *user_data, gp_gen_result *result, int32_t *n_cached);


/* ------------------------------------------------------------------------------------------------------------ */
/* Chat templates: Jinja2 rendered byte for byte as transformers' apply_chat_template(tokenize=False) renders it    */
/* (sandboxed, trim_blocks + lstrip_blocks, loopcontrols, {% generation %}, tojson, raise_exception, strftime_now) */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct gp_chat_template gp_chat_template;

/* Loads a model folder's chat template(s) as transformers 5 does: DIR/chat_template.jinja ("default") and
 * DIR/additional_chat_templates/NAME.jinja if present, else tokenizer_config.json's "chat_template" (a string, or a
 * list of {"name", "template"}), plus tokenizer_config.json's special tokens
 * (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token) as template variables.  Returns GP_OK
 * and *out (caller frees with gp_chat_template_free); GP_ERR_MISSING when the folder has no template;
 * GP_ERR_FORMAT ("file:line:col: ...") when a template does not parse. */
gp_status gp_chat_template_load(const char *model_dir, gp_chat_template **out);

/* Parses template text (len bytes) as a single template; tokenizer_config_path (may be NULL) supplies the special
 * tokens; name (may be NULL) names it in error messages.  Returns as gp_chat_template_load. */
gp_status gp_chat_template_from_string(const char *text, size_t len, const char *tokenizer_config_path,
                                       const char *name, gp_chat_template **out);

/* Frees a template; NULL is a no-op. */
void gp_chat_template_free(gp_chat_template *t);

/* Returns the value of a special token as the template sees it ("bos_token" -> "<s>"), or NULL; borrowed. */
const char *gp_chat_template_special(const gp_chat_template *t, const char *name);

#define GP_CHAT_NOW_CLOCK INT64_MIN

typedef struct gp_chat_opts {
    const char *messages_json;  /* required: JSON array of message objects ({"role", "content", "tool_calls", ...}) */
    const char *tools_json;     /* NULL (the template sees tools = none) or a JSON array of tool schemas */
    const char *documents_json; /* NULL (documents = none) or a JSON array */
    const char *kwargs_json;    /* NULL or a JSON object of extra template variables (enable_thinking, ...); they
                                   override the special tokens, as apply_chat_template's **kwargs do */
    int32_t add_generation_prompt;
    const char *template_name;  /* NULL: transformers' choice ("tool_use" when tools are given and it exists, else
                                   "default", else the only template); else a name from tokenizer_config.json's list */
    int64_t now;                /* seconds since the epoch behind strftime_now (formatted in UTC), or GP_CHAT_NOW_CLOCK
                                   for the local clock as transformers does */
} gp_chat_opts;

/* Returns opts with every field empty/0 and now = GP_CHAT_NOW_CLOCK. */
gp_chat_opts gp_chat_opts_default(void);

/* Renders the conversation.  Returns GP_OK with *out a NUL-terminated text of *out_len bytes (caller frees with
 * gp_free; out_len may be NULL); GP_ERR_FORMAT when a JSON input is malformed (message names it and the position);
 * GP_ERR_TEMPLATE when rendering fails: gp_errmsg() is exactly the text of the template's raise_exception(), or
 * "file:line:col: ..." for any other error (undefined value, type error, sandbox limit: nesting, 1e6 loop
 * iterations, 64 MiB of output, 512 MiB of values). */
gp_status gp_chat_template_render(const gp_chat_template *t, const gp_chat_opts *opts, char **out, size_t *out_len);

/* Splits a chat model's reply into OpenAI-style fields: returns GP_OK and *json_out (caller frees with gp_free) =
 * {"content": str|null, "reasoning_content": str|null, "tool_calls": [{"type": "function", "function": {"name",
 * "arguments" (a JSON string)}}, ...]} where reasoning is the text of <think>...</think> (also when the opening tag
 * was in the prompt) and tool calls are Hermes/Qwen <tool_call>{...}</tool_call> blocks or a Llama 3.x JSON
 * {"name", "parameters"|"arguments"} reply; text that parses as neither stays in content. */
gp_status gp_chat_parse_reply(const char *text, size_t len, char **json_out);

#ifdef __cplusplus
}
#endif

#endif /* GENPARITY_H */
