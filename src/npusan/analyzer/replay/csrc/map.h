/* The compiled replay core's hash map, u64 -> u64 (open addressing, linear probing);
 * ids are hashed, never used as array indexes. Included by core.h. */
#ifndef NPUSAN_CORE_MAP_H
#define NPUSAN_CORE_MAP_H

/* ------------------------------------------------------------------ hash map u64 -> u64 */

typedef struct {
    uint64_t *keys, *vals;
    uint8_t *state; /* 0 empty, 1 full, 2 deleted */
    size_t cap, n, used;
} map_t;

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

static void map_free(map_t *m) {
    free(m->keys); free(m->vals); free(m->state);
    memset(m, 0, sizeof *m);
}

static int map_get(const map_t *m, uint64_t k, uint64_t *v) {
    if (!m->cap) return 0;
    size_t mask = m->cap - 1, i = mix(k) & mask;
    for (;;) {
        uint8_t s = m->state[i];
        if (s == 0) return 0;
        if (s == 1 && m->keys[i] == k) { if (v) *v = m->vals[i]; return 1; }
        i = (i + 1) & mask;
    }
}

static int map_put(map_t *m, uint64_t k, uint64_t v);

/* Add d to the value of key k if it is there (1), else nothing (0): never allocates. */
static int map_add(map_t *m, uint64_t k, uint64_t d) {
    if (!m->cap) return 0;
    size_t mask = m->cap - 1, i = mix(k) & mask;
    for (;;) {
        uint8_t s = m->state[i];
        if (s == 0) return 0;
        if (s == 1 && m->keys[i] == k) { m->vals[i] += d; return 1; }
        i = (i + 1) & mask;
    }
}

static int map_rehash(map_t *m, size_t cap) {
    map_t o = *m;
    m->keys = malloc(cap * sizeof(uint64_t));
    m->vals = malloc(cap * sizeof(uint64_t));
    m->state = calloc(cap, 1);
    if (!m->keys || !m->vals || !m->state) {
        free(m->keys); free(m->vals); free(m->state);
        *m = o;
        return -1;
    }
    m->cap = cap; m->n = m->used = 0;
    for (size_t i = 0; i < o.cap; i++)
        if (o.state[i] == 1) map_put(m, o.keys[i], o.vals[i]);
    free(o.keys); free(o.vals); free(o.state);
    return 0;
}

static int map_put(map_t *m, uint64_t k, uint64_t v) {
    if ((m->used + 1) * 10 >= m->cap * 7) {
        size_t cap = m->cap ? m->cap : 16;
        while ((m->n + 1) * 10 >= cap * 5) cap *= 2;
        if (map_rehash(m, cap)) return -1;
    }
    size_t mask = m->cap - 1, i = mix(k) & mask, tomb = (size_t)-1;
    for (;;) {
        uint8_t s = m->state[i];
        if (s == 0) break;
        if (s == 2) { if (tomb == (size_t)-1) tomb = i; }
        else if (m->keys[i] == k) { m->vals[i] = v; return 0; }
        i = (i + 1) & mask;
    }
    if (tomb != (size_t)-1) i = tomb; else m->used++;
    m->state[i] = 1; m->keys[i] = k; m->vals[i] = v; m->n++;
    return 0;
}

static void map_del(map_t *m, uint64_t k) {
    if (!m->cap) return;
    size_t mask = m->cap - 1, i = mix(k) & mask;
    for (;;) {
        uint8_t s = m->state[i];
        if (s == 0) return;
        if (s == 1 && m->keys[i] == k) { m->state[i] = 2; m->n--; return; }
        i = (i + 1) & mask;
    }
}

#endif
