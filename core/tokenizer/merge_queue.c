/* core/tokenizer/merge_queue.c — binary min-heap of candidate merges. */
#include "core/tokenizer/merge_queue.h"

#include <stdlib.h>

static bool before(const tok_merge_t *a, const tok_merge_t *b)
{
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

int tok_merge_queue_push(tok_merge_queue_t *q, const tok_merge_t *m)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 64;
        tok_merge_t *v = realloc(q->v, cap * sizeof *v);
        if (!v)
            return -1;
        q->v = v;
        q->cap = cap;
    }
    size_t i = q->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(m, &q->v[parent]))
            break;
        q->v[i] = q->v[parent];
        i = parent;
    }
    q->v[i] = *m;
    return 0;
}

bool tok_merge_queue_pop(tok_merge_queue_t *q, tok_merge_t *m)
{
    if (!q->n)
        return false;
    *m = q->v[0];
    tok_merge_t last = q->v[--q->n];
    size_t i = 0, n = q->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && before(&q->v[c + 1], &q->v[c]))
            c++;
        if (!before(&q->v[c], &last))
            break;
        q->v[i] = q->v[c];
        i = c;
    }
    if (n)
        q->v[i] = last;
    return true;
}

void tok_merge_queue_fini(tok_merge_queue_t *q)
{
    free(q->v);
    q->v = NULL;
    q->n = q->cap = 0;
}
