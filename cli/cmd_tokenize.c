/* cmd_tokenize.c — `genparity tokenize` and `genparity detokenize` (placeholder until the tokenizer lands). */
#include "cli.h"

#include <stdio.h>

int cmd_tokenize(int argc, char **argv) {
    fprintf(stderr, "genparity tokenize: not implemented yet\n");
    return 2;
}

int cmd_detokenize(int argc, char **argv) {
    fprintf(stderr, "genparity detokenize: not implemented yet\n");
    return 2;
}
