/* tokenizer_stub.c — placeholder tokenizer entry points until the tokenizer lands (every call reports
 * GP_ERR_UNSUPPORTED). */
#include "util/util.h"

gp_status gp_tokenizer_load_dir(const char *dir, gp_tokenizer **out) {
    *out = NULL;
    return gp_set_error(GP_ERR_UNSUPPORTED, "%s: tokenizer not available in this build", dir);
}
void gp_tokenizer_free(gp_tokenizer *tok) { (void)tok; }
