/* gen_config.h — internal API of the generation config's storage and of generation_config.json (src/model/
 * gen_config.c).  The public half (gp_gen_config_default, gp_gen_config_validate, gp_finish_reason_str) is in
 * genparity.h; src/sample/ and the model loader use this one. */
#ifndef GP_GEN_CONFIG_H
#define GP_GEN_CONFIG_H

#include "genparity.h"

#include <stddef.h>
#include <stdint.h>

/* Applies a generation_config.json file onto g (only the fields present; null means "leave as is").  Arrays parsed
 * from it (bad_words_ids, sequence_bias, suppress_tokens, begin_suppress_tokens, stop_strings) live in storage
 * owned through g->_owned; release it with gp_gen_config_free_owned on the one config that owns it (the model's).
 * Errors name the file and the field; a failure leaves *g as it was.  Duplicate keys are refused. */
gp_status gp_gen_config_apply_json(gp_gen_config *g, const char *path);
/* Same, from a NUL-terminated JSON text (path used in messages only). */
gp_status gp_gen_config_apply_json_text(gp_gen_config *g, const char *json, const char *path);
/* Same, with every id checked against a vocabulary of n_vocab ids (0: unchecked), and bos_token_id read into
 * *bos_id when bos_id is not NULL and the file sets it (else *bos_id unchanged). */
gp_status gp_gen_config_load_json(gp_gen_config *g, const char *path, int32_t n_vocab, int32_t *bos_id);
gp_status gp_gen_config_parse_json(gp_gen_config *g, const char *json, size_t len, const char *path, int32_t n_vocab,
                                   int32_t *bos_id);
/* Frees storage owned by g (g->_owned) and clears the pointers into it. */
void gp_gen_config_free_owned(gp_gen_config *g);

#endif
