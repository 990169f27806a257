/* The compiled replay core, reader.c: msgpack reading: the general reader (read_obj, read_field, skip_objs) and the quick paths for kernel records as the recorder writes them.
 *
 * Part of a unity build: _core.c includes this after core.h; it is not compiled on its own. */

/* ------------------------------------------------------------------ msgpack reading */

enum { MP_OK = 0, MP_NEED = 1, MP_BAD = 2 };
enum { O_NIL, O_BOOL, O_INT, O_FLOAT, O_STR, O_BIN, O_EXT, O_ARR, O_MAP };
typedef struct { uint8_t t; i128 v; uint64_t n; } obj_t;

static inline uint64_t be(const uint8_t *p, int w) {
    uint64_t x = 0;
    for (int i = 0; i < w; i++) x = (x << 8) | p[i];
    return x;
}

static int utf8_ok(const uint8_t *s, uint64_t n) {
    uint64_t i = 0;
    while (i < n) {
        uint8_t ch = s[i];
        if (ch < 0x80) { i++; continue; }
        if (ch >= 0xc2 && ch <= 0xdf) {
            if (i + 1 >= n || (s[i + 1] & 0xc0) != 0x80) return 0;
            i += 2; continue;
        }
        if (ch >= 0xe0 && ch <= 0xef) {
            if (i + 2 >= n) return 0;
            uint8_t c1 = s[i + 1], c2 = s[i + 2];
            if ((c1 & 0xc0) != 0x80 || (c2 & 0xc0) != 0x80) return 0;
            if (ch == 0xe0 && c1 < 0xa0) return 0;
            if (ch == 0xed && c1 >= 0xa0) return 0; /* surrogates */
            i += 3; continue;
        }
        if (ch >= 0xf0 && ch <= 0xf4) {
            if (i + 3 >= n) return 0;
            uint8_t c1 = s[i + 1], c2 = s[i + 2], c3 = s[i + 3];
            if ((c1 & 0xc0) != 0x80 || (c2 & 0xc0) != 0x80 || (c3 & 0xc0) != 0x80) return 0;
            if (ch == 0xf0 && c1 < 0x90) return 0;
            if (ch == 0xf4 && c1 >= 0x90) return 0;
            i += 4; continue;
        }
        return 0;
    }
    return 1;
}

/* One object's header (and the payload of str/bin/ext); arrays and maps: their length. */
static int read_obj(const limits_t *L, const uint8_t **pp, const uint8_t *end, obj_t *o) {
    const uint8_t *p = *pp;
    uint64_t len = 0;
    int w;
    if (p >= end) return MP_NEED;
    uint8_t b = *p++;
    if (b <= 0x7f) { o->t = O_INT; o->v = b; goto done; }
    if (b >= 0xe0) { o->t = O_INT; o->v = (int8_t)b; goto done; }
    if (b <= 0x8f) { len = b & 0x0f; goto map; }
    if (b <= 0x9f) { len = b & 0x0f; goto arr; }
    if (b <= 0xbf) { len = b & 0x1f; goto str; }
    switch (b) {
    case 0xc0: o->t = O_NIL; goto done;
    case 0xc1: return MP_BAD;
    case 0xc2: case 0xc3: o->t = O_BOOL; o->v = b & 1; goto done;
    case 0xc4: case 0xc5: case 0xc6:
        w = 1 << (b - 0xc4);
        if (end - p < w) return MP_NEED;
        len = be(p, w); p += w;
        if ((uint64_t)(end - p) < len) return MP_NEED;
        if (len > L->max_bin) return MP_BAD;
        o->t = O_BIN; p += len; goto done;
    case 0xc7: case 0xc8: case 0xc9:
        w = 1 << (b - 0xc7);
        if (end - p < w) return MP_NEED;
        len = be(p, w); p += w;
        goto ext;
    case 0xca: if (end - p < 4) return MP_NEED; p += 4; o->t = O_FLOAT; goto done;
    case 0xcb: if (end - p < 8) return MP_NEED; p += 8; o->t = O_FLOAT; goto done;
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        w = 1 << (b - 0xcc);
        if (end - p < w) return MP_NEED;
        o->t = O_INT; o->v = (i128)be(p, w); p += w; goto done;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        w = 1 << (b - 0xd0);
        if (end - p < w) return MP_NEED;
        uint64_t u = be(p, w);
        int64_t s;
        if (w == 1) s = (int8_t)u; else if (w == 2) s = (int16_t)u; else if (w == 4) s = (int32_t)u; else s = (int64_t)u;
        o->t = O_INT; o->v = s; p += w; goto done;
    }
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
        len = (uint64_t)1 << (b - 0xd4);
        goto ext;
    case 0xd9: case 0xda: case 0xdb:
        w = 1 << (b - 0xd9);
        if (end - p < w) return MP_NEED;
        len = be(p, w); p += w;
        goto str;
    case 0xdc: case 0xdd:
        w = b == 0xdc ? 2 : 4;
        if (end - p < w) return MP_NEED;
        len = be(p, w); p += w;
        goto arr;
    case 0xde: case 0xdf:
        w = b == 0xde ? 2 : 4;
        if (end - p < w) return MP_NEED;
        len = be(p, w); p += w;
        goto map;
    }
    return MP_BAD;
str:
    if ((uint64_t)(end - p) < len) return MP_NEED;
    if (len > L->max_str || !utf8_ok(p, len)) return MP_BAD;
    o->t = O_STR; p += len; goto done;
ext: {
    if (end - p < 1) return MP_NEED;
    int8_t type = (int8_t)*p++;
    if ((uint64_t)(end - p) < len) return MP_NEED;
    if (len > L->max_ext) return MP_BAD;
    if (type < -1) return MP_BAD; /* msgpack refuses the other negative types ("code must be 0~127") */
    if (type == -1) { /* a timestamp: msgpack checks it */
        if (len == 8) { if ((be(p, 8) >> 34) > 999999999u) return MP_BAD; }
        else if (len == 12) { if (be(p, 4) > 999999999u) return MP_BAD; }
        else if (len != 4) return MP_BAD;
    }
    o->t = O_EXT; p += len; goto done;
}
arr:
    if (len > L->max_array) return MP_BAD;
    o->t = O_ARR; o->n = len; goto done;
map:
    if (len > L->max_map) return MP_BAD;
    o->t = O_MAP; o->n = len; goto done;
done:
    *pp = p;
    return MP_OK;
}

/* Skip `count` objects inside a container at nesting depth `depth` (the record is depth 1). */
static int skip_objs(const limits_t *L, const uint8_t **pp, const uint8_t *end, uint64_t count, uint8_t in_map,
                     int depth) {
    struct { uint64_t rem; uint8_t map; } st[MAX_DEPTH + 2];
    int sp = 0;
    st[0].rem = count; st[0].map = in_map;
    while (sp >= 0) {
        if (st[sp].rem == 0) { sp--; continue; }
        st[sp].rem--;
        int is_key = st[sp].map && (st[sp].rem & 1);
        obj_t o;
        int r = read_obj(L, pp, end, &o);
        if (r) return r;
        if (o.t == O_ARR || o.t == O_MAP) {
            if (is_key) return MP_BAD; /* an unhashable map key */
            if (depth + sp + 1 > MAX_DEPTH) return MP_BAD;
            sp++;
            st[sp].rem = o.t == O_MAP ? 2 * o.n : o.n;
            st[sp].map = o.t == O_MAP;
        }
    }
    return MP_OK;
}

/* Skip the rest of an object whose header is `o` (its elements, for a container). */
static int skip_rest(const limits_t *L, const uint8_t **pp, const uint8_t *end, const obj_t *o, int depth) {
    if (o->t == O_ARR) return skip_objs(L, pp, end, o->n, 0, depth);
    if (o->t == O_MAP) return skip_objs(L, pp, end, 2 * o->n, 1, depth);
    return MP_OK;
}

/* The encodings of an int that writers use for ids and offsets (fixints, 8 to 32 bits), decoded
 * in line: 1 and *v set, *pp moved; 0 for anything else (read_obj decides). */
#define QUICK_INT_MAX 5 /* the most bytes quick_i64 reads */
/* checked = 0: the caller knows that QUICK_INT_MAX bytes are there (no test of end) */
__attribute__((always_inline)) static inline int quick_i64_at(const uint8_t **pp, const uint8_t *end, int64_t *v,
                                                              int checked) {
    const uint8_t *p = *pp;
    if (checked && p >= end) return 0;
    uint8_t b = *p;
    if (b <= 0x7f) { *v = b; *pp = p + 1; return 1; }
    if (b == 0xcd) { /* (before the switch: offsets, sizes and ids of range traces) */
        if (checked && end - p < 3) return 0;
        *v = (uint16_t)(p[1] << 8 | p[2]); *pp = p + 3; return 1;
    }
    if (b >= 0xe0) { *v = (int8_t)b; *pp = p + 1; return 1; }
    switch (b) {
    case 0xcc: if (checked && end - p < 2) return 0; *v = p[1]; *pp = p + 2; return 1;
    case 0xce: if (checked && end - p < 5) return 0; *v = (uint32_t)be(p + 1, 4); *pp = p + 5; return 1;
    case 0xd0: if (checked && end - p < 2) return 0; *v = (int8_t)p[1]; *pp = p + 2; return 1;
    case 0xd1: if (checked && end - p < 3) return 0; *v = (int16_t)(uint16_t)(p[1] << 8 | p[2]); *pp = p + 3; return 1;
    case 0xd2: if (checked && end - p < 5) return 0; *v = (int32_t)(uint32_t)be(p + 1, 4); *pp = p + 5; return 1;
    }
    return 0;
}
__attribute__((always_inline)) static inline int quick_i64(const uint8_t **pp, const uint8_t *end, int64_t *v) {
    return quick_i64_at(pp, end, v, 1);
}

static inline int quick_int(const uint8_t **pp, const uint8_t *end, i128 *v) {
    int64_t x;
    if (!quick_i64(pp, end, &x)) return 0;
    *v = x;
    return 1;
}

/* A field at depth `depth`: an int, nil, or anything else (skipped). */
static inline int read_field(const limits_t *L, const uint8_t **pp, const uint8_t *end, field_t *f, int depth) {
    if (quick_int(pp, end, &f->v)) { f->t = F_INT; return MP_OK; }
    if (*pp < end && **pp == 0xc0) { f->t = F_NIL; ++*pp; return MP_OK; }
    obj_t o;
    int r = read_obj(L, pp, end, &o);
    if (r) return r;
    if (o.t == O_INT) { f->t = F_INT; f->v = o.v; return MP_OK; }
    f->t = o.t == O_NIL ? F_NIL : F_OTHER;
    if (o.t == O_ARR || o.t == O_MAP) {
        if (depth + 1 > MAX_DEPTH) return MP_BAD;
        return skip_rest(L, pp, end, &o, depth + 1);
    }
    return MP_OK;
}

static inline int read_access(const limits_t *L, const uint8_t **pp, const uint8_t *end, afield_t *a) {
    if (quick_int(pp, end, &a->f[0].v)) { a->t = A_INT; a->f[0].t = F_INT; return MP_OK; }
    if (*pp < end && **pp == 0x93) { /* [bid, offset, length] */
        const uint8_t *p = *pp + 1;
        if (quick_int(&p, end, &a->f[0].v) && quick_int(&p, end, &a->f[1].v) && quick_int(&p, end, &a->f[2].v)) {
            a->t = A_TRIPLE; a->f[0].t = a->f[1].t = a->f[2].t = F_INT;
            *pp = p;
            return MP_OK;
        }
    }
    obj_t o;
    int r = read_obj(L, pp, end, &o);
    if (r) return r;
    if (o.t == O_INT) { a->t = A_INT; a->f[0].t = F_INT; a->f[0].v = o.v; return MP_OK; }
    a->t = A_SHAPE;
    if (o.t == O_ARR && o.n == 3) {
        a->t = A_TRIPLE;
        for (int i = 0; i < 3; i++)
            if ((r = read_field(L, pp, end, &a->f[i], 2))) return r;
        return MP_OK;
    }
    if (o.t == O_ARR || o.t == O_MAP) return skip_rest(L, pp, end, &o, 2);
    return MP_OK;
}
