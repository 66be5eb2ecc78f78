/* decode.c — tokenizer.json decoders (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence) and
 * ids -> text, applied to the token list as Hugging Face tokenizers' decode_chain does. */
#include "tokenizer/tok_internal.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gp_status tk_dec_parse(tk_dec *d, const void *jp, const char *path, const char *field) {
    const cJSON *j = jp;
    memset(d, 0, sizeof *d);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(t)) return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.type': missing or not a string", path, field);
    const char *ty = t->valuestring;
    char sub[256];
    if (!strcmp(ty, "ByteLevel")) { d->type = TK_DEC_BYTELEVEL; return GP_OK; }
    if (!strcmp(ty, "ByteFallback")) { d->type = TK_DEC_BYTEFALLBACK; return GP_OK; }
    if (!strcmp(ty, "Fuse")) { d->type = TK_DEC_FUSE; return GP_OK; }
    if (!strcmp(ty, "Replace")) {
        d->type = TK_DEC_REPLACE;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        if (!cJSON_IsString(c) || !cJSON_IsObject(p))
            return gp_set_error(GP_ERR_FORMAT, "%s: field '%s': Replace needs 'pattern' and 'content'", path, field);
        if (!(d->content = gp_strdup(c->valuestring))) return GP_ERR_NOMEM;
        snprintf(sub, sizeof sub, "%s.pattern", field);
        return tk_regex_from_json(&d->re, p, path, sub);
    }
    if (!strcmp(ty, "Strip")) {
        d->type = TK_DEC_STRIP;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "start");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "stop");
        if (!cJSON_IsString(c) || !c->valuestring[0] || !tk_utf8_is_valid(c->valuestring, strlen(c->valuestring)))
            return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.content': expected a one-character string", path, field);
        tk_utf8_dec(c->valuestring, strlen(c->valuestring), &d->strip_content);
        if ((a && !cJSON_IsNumber(a)) || (b && !cJSON_IsNumber(b)) || (a && (a->valuedouble < 0 || a->valuedouble > 1e6)) ||
            (b && (b->valuedouble < 0 || b->valuedouble > 1e6)))
            return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.start/stop': expected small non-negative integers", path, field);
        d->start = a ? (int)a->valuedouble : 0;
        d->stop = b ? (int)b->valuedouble : 0;
        return GP_OK;
    }
    if (!strcmp(ty, "Metaspace")) {
        d->type = TK_DEC_METASPACE;
        gp_status s = tk_parse_replacement(j, &d->replacement, path, field);
        if (!s) s = tk_parse_prepend_scheme(j, &d->prepend, path, field);
        return s;
    }
    if (!strcmp(ty, "Sequence")) {
        d->type = TK_DEC_SEQUENCE;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "decoders");
        if (!cJSON_IsArray(a)) return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.decoders': missing or not an array", path, field);
        int k = cJSON_GetArraySize(a);
        d->items = gp_calloc((size_t)(k ? k : 1), sizeof *d->items);
        if (!d->items) return GP_ERR_NOMEM;
        int i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
            snprintf(sub, sizeof sub, "%s.decoders[%d]", field, i);
            gp_status s = tk_dec_parse(&d->items[i], e, path, sub);
            d->n_items = i + 1;
            if (s) return s;
        }
        return GP_OK;
    }
    return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%s.type': decoder '%s' is not supported", path, field, ty);
}

void tk_dec_free(tk_dec *d) {
    for (int i = 0; i < d->n_items; i++) tk_dec_free(&d->items[i]);
    free(d->items);
    free(d->content);
    tk_regex_free(&d->re);
    memset(d, 0, sizeof *d);
}

/* ---- decode chain ------------------------------------------------------------------------------------------- */

typedef struct {
    tk_scratch sc; /* created on first use by a regex Replace */
    int sc_ready;
    int at_start; /* 0: the list continues an earlier one (no position-0 rules) */
    int fused;    /* the list has been joined into one string by an earlier decoder */
    tk_buf work;
} dctx;

static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static int flush_bytes(tk_list *out, tk_buf *bytes) {
    if (!bytes->len) return 0;
    int rc = 0;
    if (tk_utf8_is_valid(bytes->p, bytes->len)) rc = tk_list_push(out, bytes->p, bytes->len, 0);
    else
        for (size_t k = 0; k < bytes->len && !rc; k++) rc = tk_list_push(out, "\xEF\xBF\xBD", 3, 0);
    bytes->len = 0;
    return rc;
}

static int apply_dec(const tk_dec *d, dctx *c, tk_list *in, tk_list *out);

static int apply_seq(const tk_dec *d, dctx *c, tk_list *io, tk_list *tmp) {
    for (int i = 0; i < d->n_items; i++) {
        if (apply_dec(&d->items[i], c, io, tmp)) return -1;
        tk_list t = *io;
        *io = *tmp;
        *tmp = t;
    }
    return 0;
}

/* in -> out (out cleared first); Sequence is handled by apply_seq. */
static int apply_dec(const tk_dec *d, dctx *c, tk_list *in, tk_list *out) {
    tk_list_clear(out);
    switch (d->type) {
    case TK_DEC_SEQUENCE: {
        /* nested sequence: run it on a copy so that in/out keep their roles */
        tk_list a = {0}, b = {0};
        int rc = 0;
        for (size_t i = 0; i < in->n && !rc; i++) rc = tk_list_push(&a, tk_list_str(in, i), in->slen[i], 0);
        if (!rc) rc = apply_seq(d, c, &a, &b);
        for (size_t i = 0; i < a.n && !rc; i++) rc = tk_list_push(out, tk_list_str(&a, i), a.slen[i], 0);
        tk_list_free(&a);
        tk_list_free(&b);
        return rc;
    }
    case TK_DEC_BYTELEVEL: {
        tk_buf *w = &c->work;
        w->len = 0;
        for (size_t i = 0; i < in->n; i++) {
            const char *s = tk_list_str(in, i);
            size_t n = in->slen[i], start = w->len;
            int all = 1;
            for (size_t q = 0; q < n;) {
                uint32_t cp;
                q += (size_t)tk_utf8_dec(s + q, n - q, &cp);
                int b = tk_cp_to_byte(cp);
                if (b < 0) { all = 0; break; }
                if (tk_buf_putc(w, (char)b)) return -1;
            }
            if (!all) { /* a character outside the byte map: the token's own bytes are used */
                w->len = start;
                if (tk_buf_put(w, s, n)) return -1;
            }
        }
        tk_buf clean = {0};
        int rc = tk_utf8_sanitize(&clean, w->p ? w->p : "", w->len);
        if (!rc) rc = tk_list_push(out, clean.p ? clean.p : "", clean.len, 0);
        free(clean.p);
        c->fused = 1;
        return rc;
    }
    case TK_DEC_FUSE: {
        if (tk_list_push(out, "", 0, 0)) return -1;
        for (size_t i = 0; i < in->n; i++)
            if (tk_list_extend_last(out, tk_list_str(in, i), in->slen[i])) return -1;
        c->fused = 1;
        return 0;
    }
    case TK_DEC_REPLACE: {
        size_t clen = strlen(d->content);
        for (size_t i = 0; i < in->n; i++) {
            const char *s = tk_list_str(in, i);
            size_t n = in->slen[i], pos = 0, from = 0, ms, me;
            if (tk_list_push(out, "", 0, 0)) return -1;
            for (;;) {
                if (!d->re.literal && !c->sc_ready) {
                    if (tk_scratch_init(&c->sc)) return -1;
                    c->sc_ready = 1;
                }
                int r = tk_regex_next(&d->re, &c->sc, s, n, from, &ms, &me);
                if (r < 0) return -1;
                if (r == 0) break;
                if (me == ms) {
                    if (ms >= n) break;
                    uint32_t cp;
                    from = ms + (size_t)tk_utf8_dec(s + ms, n - ms, &cp);
                    continue;
                }
                if (tk_list_extend_last(out, s + pos, ms - pos) || tk_list_extend_last(out, d->content, clen)) return -1;
                pos = from = me;
            }
            if (tk_list_extend_last(out, s + pos, n - pos)) return -1;
        }
        return 0;
    }
    case TK_DEC_BYTEFALLBACK: {
        tk_buf *bytes = &c->work;
        bytes->len = 0;
        for (size_t i = 0; i < in->n; i++) {
            const char *s = tk_list_str(in, i);
            int b = byte_token(s, in->slen[i]);
            if (b >= 0) {
                if (tk_buf_putc(bytes, (char)b)) return -1;
                continue;
            }
            if (flush_bytes(out, bytes) || tk_list_push(out, s, in->slen[i], 0)) return -1;
        }
        return flush_bytes(out, bytes);
    }
    case TK_DEC_STRIP: {
        for (size_t i = 0; i < in->n; i++) {
            const char *s = tk_list_str(in, i);
            size_t n = in->slen[i], a = 0, b = n;
            int skip_start = i == 0 && !c->at_start && c->fused;
            for (int k = 0; k < d->start && a < n && !skip_start; k++) {
                uint32_t cp;
                int l = tk_utf8_dec(s + a, n - a, &cp);
                if (cp != d->strip_content) break;
                a += (size_t)l;
            }
            for (int k = 0; k < d->stop && b > a; k++) {
                size_t p = b - 1;
                while (p > a && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
                uint32_t cp;
                tk_utf8_dec(s + p, b - p, &cp);
                if (cp != d->strip_content) break;
                b = p;
            }
            if (tk_list_push(out, s + a, b - a, 0)) return -1;
        }
        return 0;
    }
    case TK_DEC_METASPACE: {
        for (size_t i = 0; i < in->n; i++) {
            const char *s = tk_list_str(in, i);
            size_t n = in->slen[i];
            int first = i == 0 && d->prepend != TK_PREPEND_NEVER && (c->at_start || c->fused);
            if (tk_list_push(out, "", 0, 0)) return -1;
            size_t run = 0;
            for (size_t q = 0; q < n;) {
                uint32_t cp;
                int l = tk_utf8_dec(s + q, n - q, &cp);
                if (cp == d->replacement) {
                    if (tk_list_extend_last(out, s + run, q - run)) return -1;
                    if (!first && tk_list_extend_last(out, " ", 1)) return -1;
                    run = q + (size_t)l;
                }
                q += (size_t)l;
            }
            if (tk_list_extend_last(out, s + run, n - run)) return -1;
        }
        return 0;
    }
    }
    return 0;
}

gp_status tk_decode(const gp_tokenizer *tok, const int32_t *ids, size_t n, int skip_special, int at_start,
                    tk_buf *out) {
    out->len = 0;
    if (tk_buf_put(out, "", 0)) return GP_ERR_NOMEM;
    tk_list a = {0}, b = {0};
    gp_status st = GP_OK;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0) {
            st = gp_set_error(GP_ERR_RANGE, "decode: id %d at position %zu is negative", id, i);
            goto done;
        }
        /* an id past the tokenizer (a model's padded vocab_size) or one no token maps to is skipped, like
         * tokenizers' decode (id_to_token is None): transformers decodes it as "" */
        if (id >= tok->n_vocab || !tok->id_str[id]) continue;
        if (skip_special && tok->is_special[id]) continue;
        if (tk_list_push(&a, tok->id_str[id], tok->id_len[id], 0)) { st = GP_ERR_NOMEM; goto done; }
    }
    if (!tok->has_dec) { /* no decoder: tokens joined with spaces */
        for (size_t i = 0; i < a.n; i++)
            if ((i && tk_buf_putc(out, ' ')) || tk_buf_put(out, tk_list_str(&a, i), a.slen[i])) { st = GP_ERR_NOMEM; goto done; }
        goto done;
    }
    {
        dctx c;
        memset(&c, 0, sizeof c);
        c.at_start = at_start;
        int rc;
        if (tok->dec.type == TK_DEC_SEQUENCE) rc = apply_seq(&tok->dec, &c, &a, &b);
        else {
            rc = apply_dec(&tok->dec, &c, &a, &b);
            tk_list t = a;
            a = b;
            b = t;
        }
        if (rc) st = c.sc_ready ? tk_fail_status(&c.sc) : GP_ERR_NOMEM;
        free(c.work.p);
        if (c.sc_ready) tk_scratch_free(&c.sc);
        if (rc) goto done;
        for (size_t i = 0; i < a.n; i++)
            if (tk_buf_put(out, tk_list_str(&a, i), a.slen[i])) { st = GP_ERR_NOMEM; goto done; }
    }
done:
    tk_list_free(&a);
    tk_list_free(&b);
    return st;
}

gp_status gp_tokenizer_decode(const gp_tokenizer *tok, const int32_t *ids, int32_t n_ids, int skip_special,
                              char **text, size_t *len) {
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!tok || !text || n_ids < 0 || (n_ids && !ids))
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_tokenizer_decode: NULL tokenizer/ids/text or negative n_ids");
    tk_buf out = {0};
    gp_status st = tk_decode(tok, ids, (size_t)n_ids, skip_special, 1, &out);
    if (st) {
        free(out.p);
        return st;
    }
    *text = out.p;
    if (len) *len = out.len;
    return GP_OK;
}
