/* cmd_fuse.c — `genparity fuse`: a model folder with LoRA adapters merged into its weights (gp_model_fuse), as
 * mlx_lm.fuse writes it. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: genparity fuse --model DIR --adapter A[:SCALE] [--adapter B ...] -o OUT [--dequantize]\n\n"
               "Writes OUT with W' = W + scale * B A in each targeted weight's dtype (quantized weights are\n"
               "dequantized, merged and quantized again; --dequantize writes every quantized weight dense).\n");
}

int cmd_fuse(int argc, char **argv) {
    const char *model = NULL, *out = NULL;
    int dequantize = 0;
    cli_adapters ad = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return help(stdout), 0;
        if (!strcmp(a, "--dequantize")) {
            dequantize = 1;
            continue;
        }
        int r = cli_adapter_flag(argc, argv, &i, &ad);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (strcmp(a, "--model") && strcmp(a, "-o")) return cli_unknown(a);
        const char *v = cli_value(argc, argv, &i);
        if (!v) return 2;
        *(!strcmp(a, "--model") ? &model : &out) = v;
    }
    if (!model) return cli_missing("--model", NULL);
    if (!out) return cli_missing("-o", "the output folder");
    if (!ad.n) return cli_missing("--adapter", "the adapter to merge");
    gp_model *m = NULL;
    int rc = 0;
    if (cli_model_load(model, &m) != GP_OK) rc = cli_fail("loading the model");
    else if (cli_adapters_load(m, &ad)) rc = 1;
    else if (gp_model_fuse(m, ad.loaded, ad.scale, ad.n, out, dequantize) != GP_OK) rc = cli_fail("fusing");
    else fprintf(stderr, "genparity fuse: wrote %s\n", out);
    cli_adapters_free(&ad);
    gp_model_free(m);
    return rc;
}
