/* model_name.c — loading the model a --model flag names: a folder, or a Hugging Face name "org/name[@revision]"
 * resolved offline in the hub cache (gp_model_resolve). */
#include "cli.h"

gp_status cli_model_load(const char *name, gp_model **out) {
    char *dir = NULL;
    *out = NULL;
    gp_status s = gp_model_resolve(name, &dir);
    if (s) return s;
    s = gp_model_load(dir, NULL, out);
    gp_free(dir);
    return s;
}
