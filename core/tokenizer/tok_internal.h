/* core/tokenizer/tok_internal.h — the tokenizer object and what its files share (internal). */
#ifndef GUILD_TOK_INTERNAL_H
#define GUILD_TOK_INTERNAL_H

#include "core/tokenizer/merge_queue.h"
#include "core/tokenizer/pretok.h"
#include "core/tokenizer/strmap.h"
#include "core/tokenizer/tok.h"

/* Byte-level BPE merges: the pair (left id, right id) -> (rank, merged id), open addressing. */
typedef struct tok_bpe_pair {
    uint64_t key;   /* (uint64)left << 32 | right; UINT64_MAX for an empty slot */
    int32_t rank;   /* position in tokenizer.ggml.merges (the first one when a pair repeats) */
    int32_t merged; /* id of the token left+right */
} tok_bpe_pair_t;

/* Trie of the added-token texts (CONTROL, USER_DEFINED, UNKNOWN), to find which occur in a text. */
typedef struct tok_trie_node {
    int32_t child;   /* first child node, -1 if none */
    int32_t sibling; /* next node with the same parent, -1 if none */
    int32_t id;      /* token whose text ends here, -1 if none */
    uint8_t byte;    /* the byte leading here from the parent */
} tok_trie_node_t;

struct tok {
    char *name; /* for messages */
    tok_model_t model;
    char *pre;  /* pre-tokenizer name ("" for SPM) */

    int32_t n_tokens;
    char *text;        /* all token texts, each NUL-terminated */
    uint32_t *off;     /* [n_tokens] offset of each text in `text` */
    uint32_t *len;     /* [n_tokens] length of each text */
    float *score;      /* [n_tokens] */
    uint16_t *attr;    /* [n_tokens] tok_attr_t bits */
    size_t max_piece;  /* longest piece tok_piece produces */
    tok_strmap_t by_text;

    /* BPE: the token of each byte's GPT-2 char; SPM: of its <0xNN> piece (else its one-byte text); -1 none. */
    int32_t byte_token[256];

    /* BPE */
    tok_pretok_t *pretok;
    bool ignore_merges;
    tok_bpe_pair_t *pairs; /* [pair_mask + 1] */
    uint64_t pair_mask;

    /* added tokens */
    tok_trie_node_t *trie; /* [n_trie] */
    int32_t n_trie;
    int32_t trie_root[256]; /* node reached by each first byte, -1 if none */
    int32_t n_added;       /* CONTROL/USER_DEFINED/UNKNOWN tokens */
    int32_t n_user;        /* of which USER_DEFINED (recognised even without TOK_PARSE_SPECIAL) */

    int32_t bos, eos, eot, eom, unk, pad, sep;
    bool add_bos, add_eos, add_space_prefix;
    int32_t *eog; /* [n_eog] ids that end generation */
    size_t n_eog;
};

/* Bulk loads hash a batch of keys and prefetch their slots before probing, so that the cache misses of a
 * batch overlap instead of queueing one behind the other. */
#define LOAD_BATCH 32

/* Scratch space of one tok_encode call (tok_t itself is read-only). */
typedef struct tok_scratch {
    char *buf;       /* text being prepared (SPM escaping, UTF-8 repair) */
    size_t buf_cap;
    char *word;      /* BPE: a word in the GPT-2 byte alphabet */
    size_t word_cap;
    tok_sym_t *sym;
    size_t sym_cap;
    tok_merge_queue_t queue;
    tok_spans_t spans, spans_tmp;
} tok_scratch_t;

/* Makes buf hold n bytes. Returns 0 or -1. */
int tok_grow(void **buf, size_t *cap, size_t n, size_t elem);

int tok_ids_push(tok_ids_t *ids, int32_t id);

/* GPT-2's byte <-> char mapping: the code point standing for byte b, and the byte a code point stands for
 * (-1 if none). */
uint32_t tok_bpe_byte_char(uint8_t b);
int tok_bpe_char_byte(uint32_t cp);

/* Builds t->pairs from the merges (t's texts and by_text ready). */
int tok_bpe_init_merges(tok_t *t, const tok_str_t *merges, size_t n, guild_err_t *err);

/* Encodes one raw text fragment (no added tokens in it) by the vocabulary's model, appending to out. */
int tok_bpe_encode(const tok_t *t, const char *text, size_t len, tok_scratch_t *s, tok_ids_t *out,
                   guild_err_t *err);
int tok_spm_encode(const tok_t *t, const char *text, size_t len, tok_scratch_t *s, tok_ids_t *out,
                   guild_err_t *err);

/* Added tokens: builds t->trie; and cuts text into fragments (raw text or one added token). */
int tok_special_init(tok_t *t, guild_err_t *err);

typedef struct tok_frag {
    int32_t id;      /* the added token, or -1 for raw text */
    size_t off, len; /* the bytes of the fragment in the text */
} tok_frag_t;

typedef struct tok_frags {
    tok_frag_t *v;
    size_t n, cap;
} tok_frags_t;

/* Replaces frags by the fragments of text[0..len): USER_DEFINED token texts always, CONTROL/UNKNOWN ones
 * only with parse_special, cut out longest text first (ties by id), as llama.cpp's tokenizer_st_partition. */
int tok_special_partition(const tok_t *t, const char *text, size_t len, bool parse_special, tok_frags_t *frags,
                          guild_err_t *err);
void tok_frags_fini(tok_frags_t *f);

#endif
