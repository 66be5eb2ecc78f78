/* tokenizer_stub.c — placeholder tokenizer entry points until the tokenizer lands (every call reports
 * GP_ERR_UNSUPPORTED). */
#include "util/util.h"

gp_status gp_tokenizer_load_dir(const char *dir, gp_tokenizer **out) {
    (void)dir;
    *out = NULL;
    return GP_OK;
}
void gp_tokenizer_free(gp_tokenizer *tok) { (void)tok; }
gp_status gp_tokenizer_encode(const gp_tokenizer *tok, const char *text, size_t len, int add_special, int32_t **ids,
                              int32_t *n_ids) {
    return gp_set_error(GP_ERR_UNSUPPORTED, "tokenizer not available in this build");
}
gp_status gp_tokenizer_decode(const gp_tokenizer *tok, const int32_t *ids, int32_t n_ids, int skip_special, char **text,
                              size_t *len) {
    return gp_set_error(GP_ERR_UNSUPPORTED, "tokenizer not available in this build");
}
gp_status gp_detok_init(const gp_tokenizer *tok, int skip_special, gp_detok **out) {
    *out = NULL;
    return gp_set_error(GP_ERR_UNSUPPORTED, "tokenizer not available in this build");
}
void gp_detok_free(gp_detok *d) { (void)d; }
gp_status gp_detok_push(gp_detok *d, int32_t id, const char **piece) { return GP_ERR_UNSUPPORTED; }
gp_status gp_detok_flush(gp_detok *d, const char **piece) { return GP_ERR_UNSUPPORTED; }
