/* cmd_generate.c — `genparity generate`: load a model, run a prompt, print text or one JSON object. */
#include "cli.h"

#include <stdio.h>

int cmd_generate(int argc, char **argv) {
    fprintf(stderr, "genparity generate: not implemented yet\n");
    return 2;
}
