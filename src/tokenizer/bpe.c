/* bpe.c — the BPE model: merge table construction from tokenizer.json ("a b" and ["a","b"] forms), and the
 * tokenization of one pre-token (characters -> vocab ids with byte fallback / unk fusion, then rank-ordered
 * merges with a binary heap, exactly as Hugging Face tokenizers' Word::merge_all), with a per-call word cache. */
#include "tokenizer/tok_internal.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- merge map ---------------------------------------------------------------------------------------------- */

static inline uint64_t mkey(int32_t a, int32_t b) { return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1; }
static inline uint32_t mhash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

static int merge_put(tk_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
    uint64_t k = mkey(a, b);
    uint32_t j = mhash(k) & m->mask;
    while (m->slots[j].key && m->slots[j].key != k) j = (j + 1) & m->mask;
    if (!m->slots[j].key) m->n++;
    m->slots[j].key = k;
    m->slots[j].rank = rank;
    m->slots[j].id = id;
    return 0;
}

static inline const struct tk_merge_slot *merge_get(const tk_mergemap *m, int32_t a, int32_t b) {
    if (!m->slots) return NULL;
    uint64_t k = mkey(a, b);
    uint32_t j = mhash(k) & m->mask;
    for (;;) {
        const struct tk_merge_slot *s = &m->slots[j];
        if (s->key == k) return s;
        if (!s->key) return NULL;
        j = (j + 1) & m->mask;
    }
}

gp_status tk_bpe_build_merges(tk_bpe *m, const void *jp, const char *path) {
    const cJSON *merges = jp;
    int n = cJSON_GetArraySize(merges);
    size_t cap = 16;
    while (cap < (size_t)n * 2 + 2) cap *= 2;
    m->merges.slots = gp_calloc(cap, sizeof *m->merges.slots);
    if (!m->merges.slots) return GP_ERR_NOMEM;
    m->merges.mask = (uint32_t)(cap - 1);
    size_t plen = m->prefix ? strlen(m->prefix) : 0;
    char stackbuf[512];
    char *buf = stackbuf;
    size_t bufcap = sizeof stackbuf;
    gp_status st = GP_OK;
    int i = 0;
    for (const cJSON *e = merges->child; e; e = e->next, i++) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(e)) {
            const char *s = e->valuestring;
            const char *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                st = gp_set_error(GP_ERR_FORMAT, "%s: field 'model.merges[%d]': \"%s\" is not of the form \"a b\"", path, i, s);
                break;
            }
            a = s;
            la = (size_t)(sp - s);
            b = sp + 1;
            lb = strlen(b);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            a = e->child->valuestring;
            b = e->child->next->valuestring;
            la = strlen(a);
            lb = strlen(b);
        } else {
            st = gp_set_error(GP_ERR_FORMAT, "%s: field 'model.merges[%d]': expected \"a b\" or [\"a\", \"b\"]", path, i);
            break;
        }
        int32_t ia = tk_strmap_get(&m->vocab, a, la), ib = tk_strmap_get(&m->vocab, b, lb);
        if (ia < 0 || ib < 0) {
            st = gp_set_error(GP_ERR_FORMAT, "%s: field 'model.merges[%d]': token '%.*s' is not in model.vocab", path, i,
                              (int)(ia < 0 ? la : lb), ia < 0 ? a : b);
            break;
        }
        size_t bskip = plen <= lb ? plen : lb;
        size_t need = la + lb - bskip;
        if (need > bufcap) {
            char *nb = gp_malloc(need, 1);
            if (!nb) { st = GP_ERR_NOMEM; break; }
            if (buf != stackbuf) free(buf);
            buf = nb;
            bufcap = need;
        }
        memcpy(buf, a, la);
        memcpy(buf + la, b + bskip, lb - bskip);
        int32_t id = tk_strmap_get(&m->vocab, buf, need);
        if (id < 0) {
            st = gp_set_error(GP_ERR_FORMAT, "%s: field 'model.merges[%d]': merged token '%.*s' is not in model.vocab",
                              path, i, (int)need, buf);
            break;
        }
        merge_put(&m->merges, ia, ib, (uint32_t)i, id);
    }
    if (buf != stackbuf) free(buf);
    return st;
}

void tk_bpe_free(tk_bpe *m) {
    tk_strmap_free(&m->vocab);
    free(m->merges.slots);
    free(m->prefix);
    free(m->suffix);
    memset(m, 0, sizeof *m);
}

/* ---- per-call cache ----------------------------------------------------------------------------------------- */

#define CACHE_MAX_WORD 256
#define CACHE_MAX_ENTRIES 200000
#define CHUNK_BYTES (64 * 1024)

void tk_bpe_cache_free(tk_bpe_cache *c) {
    tk_strmap_free(&c->map);
    for (size_t i = 0; i < c->n_chunks; i++) free(c->chunks[i]);
    free(c->chunks);
    free(c->ids);
    free(c->ent_off);
    free(c->ent_n);
    memset(c, 0, sizeof *c);
}

static void cache_put(tk_bpe_cache *c, const char *w, size_t len, const int32_t *ids, size_t n) {
    /* best effort: on allocation failure the word is simply not cached */
    if (c->n_ent >= CACHE_MAX_ENTRIES || len > CACHE_MAX_WORD) return;
    if (!c->n_chunks || c->chunk_used + len > CHUNK_BYTES) {
        char **nc = realloc(c->chunks, (c->n_chunks + 1) * sizeof *nc);
        if (!nc) return;
        c->chunks = nc;
        if (!(c->chunks[c->n_chunks] = malloc(CHUNK_BYTES))) return;
        c->n_chunks++;
        c->chunk_used = 0;
    }
    if (c->n_ent == c->cap_ent) {
        size_t cap = c->cap_ent ? 2 * c->cap_ent : 1024;
        uint32_t *o = realloc(c->ent_off, cap * sizeof *o);
        if (!o) return;
        c->ent_off = o;
        uint32_t *q = realloc(c->ent_n, cap * sizeof *q);
        if (!q) return;
        c->ent_n = q;
        c->cap_ent = cap;
    }
    if (c->n_ids + n > c->cap_ids) {
        size_t cap = c->cap_ids ? 2 * c->cap_ids : 4096;
        while (cap < c->n_ids + n) cap *= 2;
        int32_t *v = realloc(c->ids, cap * sizeof *v);
        if (!v) return;
        c->ids = v;
        c->cap_ids = cap;
    }
    char *key = c->chunks[c->n_chunks - 1] + c->chunk_used;
    memcpy(key, w, len);
    if (tk_strmap_put(&c->map, key, len, (int32_t)c->n_ent) < 0) return;
    c->chunk_used += len;
    if (n) memcpy(c->ids + c->n_ids, ids, n * sizeof *ids); /* memcpy(NULL, .., 0) is undefined */
    c->ent_off[c->n_ent] = (uint32_t)c->n_ids;
    c->ent_n[c->n_ent] = (uint32_t)n;
    c->n_ids += n;
    c->n_ent++;
}

/* ---- word tokenization -------------------------------------------------------------------------------------- */

typedef struct {
    int32_t id, prev, next;
    uint32_t len; /* 0 = merged away */
} symbol;

typedef struct {
    uint32_t rank, pos;
    int32_t id;
} hitem;

static inline int hless(const hitem *a, const hitem *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void hpush(hitem *h, size_t *n, hitem x) {
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (!hless(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static hitem hpop(hitem *h, size_t *n) {
    hitem top = h[0], x = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m) break;
        size_t c = (l + 1 < m && hless(&h[l + 1], &h[l])) ? l + 1 : l;
        if (!hless(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
    return top;
}

static int sym_add(symbol **sy, size_t *n, size_t *cap, int32_t id, uint32_t len) {
    if (*n == *cap) {
        size_t nc = *cap * 2;
        symbol *q = gp_malloc(nc, sizeof *q);
        if (!q) return -1;
        memcpy(q, *sy, *n * sizeof *q);
        *sy = q; /* the caller frees the new array when it differs from its stack buffer */
        *cap = nc;
        return 1;
    }
    (*sy)[*n] = (symbol){id, (int32_t)*n - 1, (int32_t)*n + 1, len};
    (*n)++;
    return 0;
}

/* Merges the symbols sy [nsy] (linked by prev/next) in place: always the lowest-rank pair, leftmost on ties, like
 * tokenizers' Word::merge_all. */
static gp_status merge_all(const tk_bpe *m, symbol *sy, size_t nsy) {
    if (nsy <= 1 || !m->merges.slots) return GP_OK;
    hitem stack_h[256];
    hitem *heap = stack_h;
    gp_status st = GP_OK;
    if (nsy > 128) {
        heap = gp_malloc(nsy * 2 + 16, sizeof *heap); /* pushes never exceed live pairs + merges */
        if (!heap) { st = GP_ERR_NOMEM; goto out; }
    }
    size_t hn = 0, hcap = nsy > 128 ? nsy * 2 + 16 : 256;
    for (size_t k = 0; k + 1 < nsy; k++) {
        const struct tk_merge_slot *ms = merge_get(&m->merges, sy[k].id, sy[k + 1].id);
        if (ms) hpush(heap, &hn, (hitem){ms->rank, (uint32_t)k, ms->id});
    }
    while (hn) {
        hitem top = hpop(heap, &hn);
        symbol *a = &sy[top.pos];
        if (!a->len || a->next < 0) continue;
        symbol *b = &sy[a->next];
        const struct tk_merge_slot *ms = merge_get(&m->merges, a->id, b->id);
        if (!ms || ms->id != top.id) continue;
        a->id = top.id;
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (a->next >= 0) sy[a->next].prev = (int32_t)top.pos;
        if (hn + 2 > hcap) { /* cannot happen with the bound above; stay safe */
            st = gp_set_error(GP_ERR_RANGE, "BPE heap overflow");
            goto out;
        }
        if (a->prev >= 0) {
            const struct tk_merge_slot *p = merge_get(&m->merges, sy[a->prev].id, a->id);
            if (p) hpush(heap, &hn, (hitem){p->rank, (uint32_t)a->prev, p->id});
        }
        if (a->next >= 0) {
            const struct tk_merge_slot *q = merge_get(&m->merges, a->id, sy[a->next].id);
            if (q) hpush(heap, &hn, (hitem){q->rank, top.pos, q->id});
        }
    }
out:
    if (heap != stack_h) free(heap);
    return st;
}

gp_status tk_bpe_word(const tk_bpe *m, tk_bpe_cache *cache, const char *w, size_t len, tk_ids *out) {
    if (!len) return GP_OK;
    if (m->ignore_merges) {
        int32_t id = tk_strmap_get(&m->vocab, w, len);
        if (id >= 0) return tk_ids_push(out, id) ? GP_ERR_NOMEM : GP_OK;
    }
    if (cache && len <= CACHE_MAX_WORD) {
        int32_t e = tk_strmap_get(&cache->map, w, len);
        if (e >= 0) {
            for (uint32_t k = 0; k < cache->ent_n[e]; k++)
                if (tk_ids_push(out, cache->ids[cache->ent_off[e] + k])) return GP_ERR_NOMEM;
            return GP_OK;
        }
    }

    symbol stack_sy[128];
    symbol *sy = stack_sy;
    size_t nsy = 0, sycap = 128;
    gp_status st = GP_OK;
    char tmpstack[256];
    char *tmp = tmpstack;
    size_t plen = m->prefix ? strlen(m->prefix) : 0, slen = m->suffix ? strlen(m->suffix) : 0;
    int32_t unk_len = -1; /* pending unk run (bytes), -1 = none */

#define ADD(ID, LEN)                                                                                             \
    do {                                                                                                         \
        symbol *old_ = sy;                                                                                       \
        int r_ = sym_add(&sy, &nsy, &sycap, (ID), (LEN));                                                        \
        if (r_ < 0) { st = GP_ERR_NOMEM; goto done; }                                                            \
        if (r_ > 0) {                                                                                            \
            if (old_ != stack_sy) free(old_);                                                                    \
            sym_add(&sy, &nsy, &sycap, (ID), (LEN));                                                             \
        }                                                                                                        \
    } while (0)

    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t cl = (size_t)tk_utf8_dec(w + i, len - i, &cp);
        int first = i == 0, last = i + cl >= len;
        const char *s = w + i;
        size_t sl = cl;
        if ((!first && plen) || (last && slen)) {
            size_t need = cl + plen + slen;
            if (need > sizeof tmpstack) { st = gp_set_error(GP_ERR_RANGE, "BPE symbol too long"); goto done; }
            size_t k = 0;
            if (!first && plen) { memcpy(tmp, m->prefix, plen); k = plen; }
            memcpy(tmp + k, w + i, cl);
            k += cl;
            if (last && slen) { memcpy(tmp + k, m->suffix, slen); k += slen; }
            s = tmp;
            sl = k;
        }
        int32_t id = tk_strmap_get(&m->vocab, s, sl);
        if (id >= 0) {
            if (unk_len >= 0) { ADD(m->unk_id, (uint32_t)unk_len); unk_len = -1; }
            ADD(id, (uint32_t)cl);
        } else {
            int done_fb = 0;
            if (m->byte_fallback) {
                int ok = 1;
                for (size_t k = 0; k < sl; k++)
                    if (m->byte_ids[(unsigned char)s[k]] < 0) ok = 0;
                if (ok) {
                    for (size_t k = 0; k < sl; k++) ADD(m->byte_ids[(unsigned char)s[k]], 1);
                    done_fb = 1;
                }
            }
            if (!done_fb && m->unk_id >= 0) {
                if (unk_len >= 0 && m->fuse_unk) unk_len += (int32_t)cl;
                else {
                    if (unk_len >= 0) ADD(m->unk_id, (uint32_t)unk_len);
                    unk_len = (int32_t)cl;
                }
            }
        }
        i += cl;
    }
    if (unk_len >= 0) ADD(m->unk_id, (uint32_t)unk_len);
    if (nsy) sy[nsy - 1].next = -1;

    if ((st = merge_all(m, sy, nsy))) goto done;
    {
        size_t start = out->n;
        for (int32_t k = nsy ? 0 : -1; k >= 0; k = sy[k].next)
            if (tk_ids_push(out, sy[k].id)) { st = GP_ERR_NOMEM; goto done; }
        if (cache && out->n > start) /* a word with no ids (no unk, no byte fallback) is not cached */
            cache_put(cache, w, len, out->v + start, out->n - start);
    }
done:
#undef ADD
    if (sy != stack_sy) free(sy);
    return st;
}
