/* lexer.h — tokens of a Jinja2 template (internal to src/template/). */
#ifndef GP_TPL_LEXER_H
#define GP_TPL_LEXER_H

#include <stddef.h>
#include <stdint.h>

enum { TK_EOF, TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END, TK_NAME, TK_STRING, TK_INT, TK_FLOAT,
       TK_OP };

typedef struct tpl_tok {
    int type;
    const char *s; /* points into the source (TK_STRING: with its quotes; TK_TEXT: the text after whitespace control) */
    uint32_t n, line, col;
} tpl_tok;

typedef struct tpl_lexer {
    const char *src;  /* newlines already normalised to \n */
    size_t len;
    const char *name;
    tpl_tok *t;
    size_t n, cap;
    char err[256];
    size_t lpos, lstart; /* position tracking */
    uint32_t line;
} tpl_lexer;

/* Fills lx->t; returns 0, or -1 with lx->err = "name:line:col: message". */
int tpl_lex(tpl_lexer *lx);

#endif
