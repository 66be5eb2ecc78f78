/* main.c — entry point of the genparity tool: finds the command in the table (cli/commands.c) and runs it;
 * `genparity --help` and `genparity help [COMMAND]` are printed from the same table. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "genparity %s — text generation with transformers parity\n\nusage: genparity <command> [options]\n\n"
               "commands:\n", gp_version());
    for (const cli_command *c = cli_commands; c->name; c++)
        fprintf(f, "  %-13s %s\n  %-13s   %s\n", c->name, c->summary, "", c->usage);
    fprintf(f, "\n`genparity help COMMAND` (or `genparity COMMAND --help`) prints a command's flags.\n");
}

static const cli_command *find(const char *name) {
    for (const cli_command *c = cli_commands; c->name; c++)
        if (!strcmp(c->name, name)) return c;
    return NULL;
}

static char g_prog[64];

static int run(const cli_command *c, int argc, char **argv) {
    snprintf(g_prog, sizeof g_prog, "genparity %s", c->name);
    cli_prog = g_prog;
    return c->run(argc, argv);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "help")) {
        if (argc < 3) {
            usage(stdout);
            return 0;
        }
        const cli_command *c = find(argv[2]);
        if (!c) {
            fprintf(stderr, "genparity: unknown command '%s'\n\n", argv[2]);
            usage(stderr);
            return 2;
        }
        char *help_argv[] = {argv[2], "--help", NULL};
        return run(c, 2, help_argv);
    }
    if (!strcmp(argv[1], "--version")) return run(find("version"), argc - 1, argv + 1);
    const cli_command *c = find(argv[1]);
    if (!c) {
        fprintf(stderr, "genparity: unknown command '%s'\n\n", argv[1]);
        usage(stderr);
        return 2;
    }
    return run(c, argc - 1, argv + 1);
}
