/* The compiled replay core, overlap.c: strided views: the overlap test of two strided shapes (overlap.py).
 *
 * Part of a unity build: _core.c includes this after state.c; it is not compiled on its own. */

/* ------------------------------------------------------------------ strided views (analyzer/overlap.py) */

#define VIEW_BUDGET 2000          /* overlap.BUDGET: steps one test may take */


static inline i128 shape_hi(const shape_t *x) {
    i128 h = x->lo + x->run;
    for (int k = 0; k < x->nd; k++) h += (x->n[k] - 1) * x->s[k];
    return h;
}

static inline i128 floordiv(i128 a, i128 b) { /* Python's a // b, b > 0 */
    i128 q = a / b;
    if ((a % b != 0) && (a < 0)) q--;
    return q;
}
static inline i128 imax(i128 a, i128 b) { return a > b ? a : b; }
static inline i128 imin(i128 a, i128 b) { return a < b ? a : b; }
static i128 igcd(i128 a, i128 b) {
    if (a < 0) a = -a;
    if (b < 0) b = -b;
    while (b) { i128 t = a % b; a = b; b = t; }
    return a;
}

typedef struct { i128 d, lo, hi; } term_t;
typedef struct { term_t t[2 * MAX_DIMS]; int m; i128 rmin[2 * MAX_DIMS + 1], rmax[2 * MAX_DIMS + 1], g[2 * MAX_DIMS + 1]; } terms_t;

/* overlap._search: 1 found, 0 not, -1 budget exhausted */
static int vsearch(const terms_t *T, int i, i128 c, i128 lo, i128 hi, long *budget) {
    i128 a = lo - c, b = hi - c;
    if (T->rmin[i] > b || T->rmax[i] < a) return 0;
    i128 gi = T->g[i];
    if (-floordiv(-a, gi) * gi > b) return 0;
    const term_t *t = &T->t[i];
    i128 t_lo = imax(t->lo, -floordiv(T->rmax[i + 1] - a, t->d));
    i128 t_hi = imin(t->hi, floordiv(b - T->rmin[i + 1], t->d));
    if (i == T->m - 1) return t_lo <= t_hi;
    for (i128 v = t_lo; v <= t_hi; v++) {
        if (--*budget < 0) return -1;
        int r = vsearch(T, i + 1, c + v * t->d, lo, hi, budget);
        if (r) return r;
    }
    return 0;
}

/* overlap._intersect: 1, 0, or -1 (no answer within the budget) */
static int vintersect(Core *c, const shape_t *x, const shape_t *y) {
    if (x->lo >= shape_hi(y) || y->lo >= shape_hi(x)) return 0;
    if (!x->nd && !y->nd) return 1;
    i128 cc = y->lo - x->lo;
    if (x->nd + y->nd == 1 || (x->nd == 1 && y->nd == 1 && x->s[0] == y->s[0])) {
        i128 d = x->nd ? x->s[0] : y->s[0];
        i128 tmin = x->nd ? 1 - x->n[0] : 0, tmax = y->nd ? y->n[0] - 1 : 0;
        return imax(tmin, -floordiv(cc + y->run - 1, d)) <= imin(tmax, floordiv(x->run - 1 - cc, d));
    }
    terms_t T;
    T.m = 0;
    for (int pass = 0; pass < 2; pass++) {
        const shape_t *v = pass ? y : x;
        for (int k = 0; k < v->nd; k++) {
            int j;
            for (j = 0; j < T.m && T.t[j].d != v->s[k]; j++) {}
            if (j == T.m) { T.t[j].d = v->s[k]; T.t[j].lo = T.t[j].hi = 0; T.m++; }
            if (pass) T.t[j].hi += v->n[k] - 1; else T.t[j].lo -= v->n[k] - 1;
        }
    }
    /* sorted by (hi - lo, -d), insertion order kept for ties (Python's sort is stable) */
    for (int i = 1; i < T.m; i++) {
        term_t key = T.t[i];
        int j = i - 1;
        while (j >= 0 && (T.t[j].hi - T.t[j].lo > key.hi - key.lo ||
                          (T.t[j].hi - T.t[j].lo == key.hi - key.lo && -T.t[j].d > -key.d))) {
            T.t[j + 1] = T.t[j];
            j--;
        }
        T.t[j + 1] = key;
    }
    T.rmin[T.m] = T.rmax[T.m] = T.g[T.m] = 0;
    for (int i = T.m - 1; i >= 0; i--) {
        T.rmin[i] = T.rmin[i + 1] + T.t[i].lo * T.t[i].d;
        T.rmax[i] = T.rmax[i + 1] + T.t[i].hi * T.t[i].d;
        T.g[i] = igcd(T.t[i].d, T.g[i + 1]);
    }
    long allowed = c->vbudget_left < VIEW_BUDGET ? (long)c->vbudget_left : VIEW_BUDGET;
    long budget = allowed;
    int r = vsearch(&T, 0, cc, 1 - y->run, x->run - 1, &budget);
    if (r < 0) c->vgave_up++;
    c->vbudget_left -= allowed - (budget > 0 ? budget : 0);
    return r;
}

static int voverlaps(Core *c, const shape_t *x, const shape_t *y) { return vintersect(c, x, y) != 0; }

/* overlap.overlaps_range: x against [lo, hi) */
static int voverlaps_range(Core *c, const shape_t *x, u128 lo_u, u128 hi_u) {
    i128 xhi = shape_hi(x);
    i128 hi = hi_u > (u128)xhi ? xhi : (i128)hi_u;
    i128 lo = lo_u < (u128)x->lo ? x->lo : (i128)lo_u;
    if (lo >= hi) return 0;
    if (!x->nd) return 1;
    if (x->nd == 1) {
        i128 n = x->n[0], d = x->s[0];
        return imax(0, floordiv(lo - x->run - x->lo, d) + 1) <= imin(n - 1, -floordiv(x->lo - hi, d) - 1);
    }
    shape_t r = {lo, hi - lo, 0, {0}, {0}};
    return voverlaps(c, x, &r);
}

/* overlap.covers: every byte of small in big (big NULL: the whole block) */
static int vcovers(Core *c, const shape_t *big, const shape_t *small) {
    if (!big) return 1;
    if (small->lo < big->lo || shape_hi(small) > shape_hi(big)) return 0;
    if (!big->nd) return 1;
    i128 delta = small->lo - big->lo;
    int same = small->nd == big->nd;
    for (int k = 0; same && k < big->nd; k++) same = small->n[k] == big->n[k] && small->s[k] == big->s[k];
    if (same) return delta + small->run <= big->run;
    if (small->nd) return 0;
    i128 first = shape_hi(small) - big->run;
    if (first > small->lo) return 0;
    shape_t starts = *big;
    starts.run = 1;
    shape_t r = {first, small->lo - first + 1, 0, {0}, {0}};
    return vintersect(c, &starts, &r) == 1;
}
