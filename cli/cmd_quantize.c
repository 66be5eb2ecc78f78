/* cmd_quantize.c — `genparity quantize`: an MLX-quantized copy of a model folder (gp_model_quantize), loadable by
 * genparity and by mlx_lm.load, with a progress line on stderr. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: genparity quantize --model DIR --bits 2|3|4|5|6|8 --group-size 32|64|128 -o OUT\n\n"
               "Writes OUT as mlx_lm.convert -q does (MLX affine: uint32 weights + scales/biases per group, config\n"
               "\"quantization\"), streamed one tensor at a time.  Defaults: --bits 4, --group-size 64.\n");
}

static void progress(float f, void *ud) {
    fprintf(stderr, "\rgenparity quantize: %3d%%", (int)(f * 100.0f + 0.5f));
    if (f >= 1.0f) fputc('\n', stderr);
}

int cmd_quantize(int argc, char **argv) {
    const char *model = NULL, *out = NULL;
    gp_quantize_params p = {.bits = 4, .group_size = 64, .progress = progress};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return help(stdout), 0;
        const char *v = NULL;
        if (strcmp(a, "--model") && strcmp(a, "-o") && strcmp(a, "--bits") && strcmp(a, "--group-size"))
            return cli_unknown(a);
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--bits")) {
            if (cli_i32(a, v, 1, 64, &p.bits)) return 2;
        } else if (cli_i32(a, v, 1, 1 << 20, &p.group_size)) return 2;
    }
    if (!model) return cli_missing("--model", NULL);
    if (!out) return cli_missing("-o", "the output folder");
    if (gp_model_quantize(model, out, &p) != GP_OK) return cli_fail("quantizing");
    fprintf(stderr, "genparity quantize: wrote %s (%d-bit, group %d)\n", out, (int)p.bits, (int)p.group_size);
    return 0;
}
