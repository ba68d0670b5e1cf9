/* core/tokenizer/merge_queue.h — the candidate merges of a BPE or SPM run, best first (internal).
 *
 * A binary min-heap on (prio, left): BPE pushes the merge rank, SPM the negated piece score, and ties go to
 * the leftmost pair, which is the order llama.cpp's priority queues pop in. Entries go stale when a symbol
 * they name is merged away; the caller checks on pop (the sizes no longer add up). */
#ifndef GUILD_TOK_MERGE_QUEUE_H
#define GUILD_TOK_MERGE_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A symbol of the text being merged: a run of bytes, linked to its live neighbours. */
typedef struct tok_sym {
    int32_t prev, next; /* neighbour symbol indices, -1 at the ends */
    uint32_t off, len;  /* bytes of the symbol in the text; len 0 once merged into its left neighbour */
    int32_t id;         /* token id of the symbol's text, -1 if it has none */
} tok_sym_t;

typedef struct tok_merge {
    double prio;          /* smaller pops first: BPE rank, or -score for SPM */
    int32_t left, right;  /* symbol indices */
    uint32_t size;        /* len(left) + len(right) when pushed: a different sum on pop means stale */
    int32_t id;           /* the token the merge produces */
} tok_merge_t;

typedef struct tok_merge_queue {
    tok_merge_t *v;
    size_t n, cap;
} tok_merge_queue_t;

/* Returns 0, or -1 when out of memory. */
int tok_merge_queue_push(tok_merge_queue_t *q, const tok_merge_t *m);
/* Pops the best entry into *m; false when empty. */
bool tok_merge_queue_pop(tok_merge_queue_t *q, tok_merge_t *m);
void tok_merge_queue_fini(tok_merge_queue_t *q);

#endif
