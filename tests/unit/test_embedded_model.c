/* test_embedded_model.c — models/shakespeare-llama is the fixture model, unchanged (so the fixture's parity results
 * hold for it), and it loads as the CLI's default model. */
#include "test.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

TEST(embedded_model_is_the_fixture) {
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                           "tokenizer_config.json"};
    for (int i = 0; i < 5; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/shakespeare-llama/%s", files[i]);
        char *fx = gp_test_fixture(rel);
        if (!fx) return;
        char *a, *b;
        size_t na, nb;
        REQUIRE(gp_read_file(rel, 64u << 20, &a, &na) == GP_OK);
        REQUIRE(gp_read_file(fx, 64u << 20, &b, &nb) == GP_OK);
        if (na != nb || memcmp(a, b, na)) {
            NOTE("%s differs from %s", rel, fx);
            gp_test_failed = 1;
        }
        free(a);
        free(b);
        free(fx);
    }
}
