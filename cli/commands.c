/* commands.c — the table of genparity's commands: it drives both the dispatch and `genparity --help`.
 *
 * To add a command:
 *   1. write cli/cmd_<name>.c with `int cmd_<name>(int argc, char **argv)`: argv[0] is the command's name; it
 *      prints its help on --help / -h (exit 0), parses numbers with cli_i32/cli_f64/... (cli/args.c; a bad value
 *      exits 2 naming the flag), names a missing required flag with cli_missing, and returns the exit code
 *      (0 ok, 1 failure, 2 usage error);
 *   2. declare it in cli/cli.h (next to the others);
 *   3. add one row below: name, one-line summary (shown by `genparity --help`), usage line.  Rows appear in this
 *      order in the help; keep related commands together. */
#include "cli.h"
#include "../server/server.h"

#include <stdio.h>
#include <string.h>

static int cmd_version(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: genparity version\n  prints the version\n");
        return 0;
    }
    printf("genparity %s (backends: %s)\n", gp_version(), gp_backends());
    return 0;
}

const cli_command cli_commands[] = {
    {"generate", "generate text from a prompt",
     "genparity generate [--model DIR] (--prompt TEXT | --prompt-ids 1,2,3) [options]", cmd_generate},
    {"tokenize", "text to ids",
     "genparity tokenize (--model DIR | --tokenizer FILE) [--add-special] (--text S | --jsonl)", cmd_tokenize},
    {"detokenize", "ids to text",
     "genparity detokenize (--model DIR | --tokenizer FILE) --ids 1,2,3 [--skip-special]", cmd_detokenize},
    {"steer-vector", "build a steering vector from two prompt lists",
     "genparity steer-vector --model DIR --positive FILE --negative FILE --layer L -o OUT.safetensors", cmd_steer_vector},
    {"cache", "build / inspect KV cache files",
     "genparity cache build --model DIR (--prompt TEXT | --prompt-ids 1,2,3 | --turns FILE) -o FILE", cmd_cache},
    {"validate", "steering validation harness (determinism, divergence, suspect lines, KL)",
     "genparity validate --model DIR --prompts FILE --steer-vector FILE[:TENSOR] --layer L", cmd_validate},
    {"bench", "llama-bench-style speed test",
     "genparity bench --model DIR [--model DIR ...] [-p 512] [-n 128] [-r 5] [--threads T]", cmd_bench},
    {"make-model", "write a random-weight model folder of a real shape",
     "genparity make-model --shape NAME [--dtype f32|bf16|f16] [--seed N] [--layers N] -o DIR", cmd_make_model},
    {"quantize", "write an MLX-quantized copy of a model folder (as mlx_lm.convert -q)",
     "genparity quantize --model DIR --bits 2|3|4|5|6|8 --group-size 32|64|128 -o OUT", cmd_quantize},
    {"fuse", "write a model with LoRA adapters merged into its weights (as mlx_lm.fuse)",
     "genparity fuse --model DIR --adapter A[:SCALE] -o OUT [--dequantize]", cmd_fuse},
    {"check-models", "run several models on the same prompts: speed, memory, outputs (md/html/json)",
     "genparity check-models --model DIR|NAME [--model ...] (--prompt TEXT | --prompts FILE) [--format md|html|json]",
     cmd_check_models},
    {"chat-template", "render a conversation through a model's chat template (as apply_chat_template)",
     "genparity chat-template (--model DIR | --template FILE) --messages FILE.json [--tools FILE.json] [--add-generation-prompt]",
     cmd_chat_template},
    {"chat", "interactive conversation (streams; KV cache kept across turns; /reset /save /load; Ctrl-C stops a reply)",
     "genparity chat --model DIR [--system TEXT] [--kwargs JSON] [sampling flags]", cmd_chat},
    {"serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, SSE, slots, queue)",
     "genparity serve --model DIR [--host 127.0.0.1] [--port 8080] [--parallel N] [--max-queue M] [--api-key KEY]",
     cmd_serve},
    {"version", "print the version", "genparity version", cmd_version},
    {NULL, NULL, NULL, NULL},
};
