/* synth.h — writes small synthetic Hugging Face model folders (config.json + model.safetensors with deterministic
 * pseudo-random F32 weights) for tests of loading and bad input. */
#ifndef GP_TEST_SYNTH_H
#define GP_TEST_SYNTH_H

/* Writes dir/config.json = config_json and, if the config parses, dir/model.safetensors with every tensor a Llama-
 * family model of that config needs, except the tensor named skip (may be NULL); the tensor named bad_shape (may be
 * NULL) gets one extra row.  Returns 0 on success. */
int synth_model(const char *dir, const char *config_json, const char *skip, const char *bad_shape);

/* A valid tiny Llama config.json (hidden 16, 2 layers, 4 heads, 2 kv heads, ff 32, vocab 64) with the field
 * `field` replaced by the raw JSON `value` (field NULL: unchanged).  Returns a static buffer. */
const char *synth_llama_config(const char *field, const char *value);

#endif
