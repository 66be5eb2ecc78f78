/* detok.c — the streaming detokenizer: ids arrive one at a time; the text of the ids since the last safe point
 * (a "window") is decoded, and its stable prefix is emitted.  Text is held back while it may still change:
 * trailing byte-fallback tokens (a later byte can turn the run into U+FFFDs), trailing U+FFFD (an incomplete
 * UTF-8 character), and trailing characters a Strip decoder could still remove.  When nothing is held back the
 * window restarts after the last id, so each push costs O(window) = O(1) amortized, and the concatenation of
 * the pieces equals gp_tokenizer_decode of all ids. */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FFFD_HOLD 4 /* a UTF-8 character spans at most 4 byte-level tokens */

struct gp_detok {
    const gp_tokenizer *tok;
    int skip_special;
    int at_start;     /* the window starts at the beginning of the stream */
    tk_ids win;       /* ids of the current window */
    size_t emitted;   /* bytes of the window's text already emitted */
    tk_buf text;      /* decode scratch */
    tk_buf piece;     /* the returned piece */
    int byte_fallback;   /* the decoder chain has ByteFallback */
    uint32_t strip_char; /* a Strip decoder with stop > 0: its character and count */
    int strip_stop;
    size_t n_joined;     /* no decoder: contributing ids streamed so far (all but the first get a leading space) */
};

static void scan_decoders(gp_detok *d, const tk_dec *x) {
    if (x->type == TK_DEC_SEQUENCE)
        for (int i = 0; i < x->n_items; i++) scan_decoders(d, &x->items[i]);
    if (x->type == TK_DEC_BYTEFALLBACK) d->byte_fallback = 1;
    if (x->type == TK_DEC_STRIP && x->stop > 0) {
        d->strip_char = x->strip_content;
        d->strip_stop = x->stop;
    }
}

gp_status gp_detok_init(const gp_tokenizer *tok, int skip_special, gp_detok **out) {
    if (out) *out = NULL;
    if (!tok || !out) return gp_set_error(GP_ERR_INVALID_ARG, "gp_detok_init: NULL tokenizer or out");
    gp_detok *d = gp_calloc(1, sizeof *d);
    if (!d) return GP_ERR_NOMEM;
    d->tok = tok;
    d->skip_special = skip_special;
    d->at_start = 1;
    if (tok->has_dec) scan_decoders(d, &tok->dec);
    if (tk_buf_put(&d->piece, "", 0)) {
        gp_detok_free(d);
        return GP_ERR_NOMEM;
    }
    *out = d;
    return GP_OK;
}

void gp_detok_free(gp_detok *d) {
    if (!d) return;
    free(d->win.v);
    free(d->text.p);
    free(d->piece.p);
    free(d);
}

/* Returns the byte of a "<0xNN>" token, or -1. */
static int byte_value(const gp_tokenizer *t, int32_t id) {
    const char *s = t->id_str[id];
    if (!s || t->id_len[id] != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (x < 0) return -1;
        v = v * 16 + x;
    }
    return v;
}

/* The id adds nothing to the decoder's token list (tk_decode drops it before the decoders run): an id past the
 * tokenizer's ids, a hole, or a special token when skip_special is set. */
static int skipped(const gp_detok *d, int32_t id) {
    const gp_tokenizer *t = d->tok;
    return id >= t->n_vocab || !t->id_str[id] || (d->skip_special && t->is_special[id]);
}

static int is_byte(const gp_detok *d, int32_t id) { return !skipped(d, id) && byte_value(d->tok, id) >= 0; }

/* Widens hold (the ids at the end of the window that are not decoded yet) so that the cut never splits a
 * byte-fallback run: ByteFallback turns a whole run into U+FFFDs when it is not valid UTF-8, so the text of a
 * prefix that ends inside a run is not a prefix of the text of the whole run.  Skipped ids do not end a run. */
static size_t safe_hold(const gp_detok *d, size_t hold) {
    if (!d->byte_fallback) return hold;
    const int32_t *w = d->win.v;
    const size_t n = d->win.n;
    for (;;) {
        size_t cut = n - hold, j = cut;
        int run_may_go_on = 1; /* the first contributing held id is a byte token, or there is none yet */
        for (size_t i = cut; i < n; i++)
            if (!skipped(d, w[i])) {
                run_may_go_on = is_byte(d, w[i]);
                break;
            }
        if (!run_may_go_on) return hold;
        while (j > 0 && skipped(d, w[j - 1])) j--;
        if (j == 0 || !is_byte(d, w[j - 1])) return hold;
        hold = n - (j - 1);
    }
}

static int ends_with_fffd(const tk_buf *b) { return b->len >= 3 && !memcmp(b->p + b->len - 3, "\xEF\xBF\xBD", 3); }

/* Sets the piece to text[emitted .. stable) and advances emitted. */
static gp_status emit(gp_detok *d, size_t stable, const char **piece) {
    d->piece.len = 0;
    if (d->piece.p) d->piece.p[0] = 0;
    if (stable > d->emitted && tk_buf_put(&d->piece, d->text.p + d->emitted, stable - d->emitted)) return GP_ERR_NOMEM;
    if (!d->piece.p && tk_buf_put(&d->piece, "", 0)) return GP_ERR_NOMEM;
    if (stable > d->emitted) d->emitted = stable;
    *piece = d->piece.p;
    return GP_OK;
}

/* Without a decoder, decode joins the token strings with single spaces: each contributing id is final at once. */
static gp_status push_no_decoder(gp_detok *d, int32_t id, const char **piece) {
    d->piece.len = 0;
    d->piece.p[0] = 0;
    if (!skipped(d, id)) {
        const gp_tokenizer *t = d->tok;
        if ((d->n_joined && tk_buf_putc(&d->piece, ' ')) || tk_buf_put(&d->piece, t->id_str[id], t->id_len[id]))
            return GP_ERR_NOMEM;
        d->n_joined++;
    }
    *piece = d->piece.p;
    return GP_OK;
}

gp_status gp_detok_push(gp_detok *d, int32_t id, const char **piece) {
    if (piece) *piece = "";
    if (!d || !piece) return gp_set_error(GP_ERR_INVALID_ARG, "gp_detok_push: NULL detok or piece");
    const gp_tokenizer *t = d->tok;
    d->piece.len = 0;
    d->piece.p[0] = 0;
    if (id < 0)
        return gp_set_error(GP_ERR_RANGE, "gp_detok_push: id %d is negative", id);
    if (!t->has_dec) return push_no_decoder(d, id, piece);
    if (tk_ids_push(&d->win, id)) return GP_ERR_NOMEM;
    const size_t n = d->win.n;
    size_t hold = safe_hold(d, 0);
    gp_status st;
    for (int extra = 0;; extra++) {
        st = tk_decode(t, d->win.v, n - hold, d->skip_special, d->at_start, &d->text);
        if (st) return st;
        if (!ends_with_fffd(&d->text) || hold == n || extra == MAX_FFFD_HOLD) break;
        do hold++; /* hold back one more contributing id */
        while (hold < n && skipped(d, d->win.v[n - hold]));
        hold = safe_hold(d, hold);
    }
    size_t stable = d->text.len, kept = 0;
    if (ends_with_fffd(&d->text) && hold == 0) {
        /* even the whole window ends in U+FFFD: hold it back too, the next ids may complete the character */
        stable -= 3;
        kept = 1;
    }
    for (int k = 0; k < d->strip_stop && stable > 0; k++) {
        size_t p = stable - 1;
        while (p > 0 && ((unsigned char)d->text.p[p] & 0xC0) == 0x80) p--;
        uint32_t cp;
        tk_utf8_dec(d->text.p + p, stable - p, &cp);
        if (cp != d->strip_char) break;
        stable = p;
        kept = 1;
    }
    if (stable < d->emitted) stable = d->emitted; /* never happens with the rules above; emit nothing then */
    st = emit(d, stable, piece);
    if (st) return st;
    if (hold == 0 && !kept && (!d->at_start || d->text.len > 0)) { /* safe point: restart the window */
        d->win.n = 0;
        d->emitted = 0;
        d->at_start = 0;
    }
    return GP_OK;
}

gp_status gp_detok_flush(gp_detok *d, const char **piece) {
    if (piece) *piece = "";
    if (!d || !piece) return gp_set_error(GP_ERR_INVALID_ARG, "gp_detok_flush: NULL detok or piece");
    gp_status st = tk_decode(d->tok, d->win.v, d->win.n, d->skip_special, d->at_start, &d->text);
    if (st) return st;
    st = emit(d, d->text.len, piece);
    if (st) return st;
    if (d->text.len) d->at_start = 0;
    d->win.n = 0;
    d->emitted = 0;
    return GP_OK;
}

size_t gp_detok_piece_len(const gp_detok *d) { return d ? d->piece.len : 0; }
