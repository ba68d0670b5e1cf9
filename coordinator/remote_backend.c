#include "coordinator/remote_backend.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/log.h"
#include "proto/guild.pb-c.h"
#include "ipc/doorbell.h"

#define WAIT_SLICE_NS 20000000u /* between slices: is the GPU worker still the one we asked? */
#define REMOTE_MTP_STEPS 64    /* steps of one draft (--spec-max is at most 16) */

/* What the coordinator keeps of one sequence of the GPU worker's backend. */
typedef struct rseq {
    int32_t *history; /* [n_ctx] the tokens of the cache, position order */
    int32_t kv_len;   /* positions in the cache (the caller's view) */
    int32_t gpu_len;  /* leading positions the current GPU worker holds that match history */
    int32_t start;    /* kv_len when the current forward call began */
    int32_t rows;     /* rows of this sequence in the current chunk */
    int32_t rb_from, rb_n; /* the GPU worker's last request of this sequence: from position rb_from, rb_n rows
                              whose recurrent states it kept (o.rollback; 0: none), as its backend counts them */
} rseq_t;

typedef struct remote {
    backend_t base;
    sup_t *sup;
    guild_step_t *st;
    remote_options_t o;
    rseq_t *sq;       /* [n_seq] */
    uint64_t epoch;   /* the GPU worker gpu_len is about; 0: none yet */
    uint64_t seq;     /* last request rung */
    int32_t *rows;    /* [max_out] scratch: rows of a chunk wanting logits */
    uint8_t *c_full;  /* [max_out] scratch: of those, the ones a pick call wants in full */
    bool pick;        /* the forward call in progress is a pick call (backend_forward_pick) */
    int32_t *c_seq, *c_pos; /* [n_batch] scratch: a chunk's sequences and positions */
    int32_t *r_seq, *r_pos; /* [n_batch] scratch: a replayed chunk's */
    remote_stats_t stats;
    /* the multi-token-prediction draft in progress (remote_mtp_step): its steps' tokens, for a GPU worker that
     * replaced the one that took them */
    int32_t mtp_tok[REMOTE_MTP_STEPS];
    int32_t mtp_n;       /* steps taken */
    uint64_t mtp_epoch;  /* by the GPU worker of this epoch */
} remote_t;

/* Rings request *req (numbered here) and waits for its answer. 0: answered (the response's status says how); 1:
 * the GPU worker was lost before answering; -1 with err: the pipeline failed. */
static int ring(remote_t *r, guild_step_request_t *req, guild_err_t *err)
{
    guild_step_shared_t *sh = r->st->sh;
    const uint64_t seq = ++r->seq;
    req->seq = seq;
    sh->req = *req;
    guild_doorbell_ring(&sh->request, seq);
    guild_wait_policy_t pol = {.spin_ns = r->o.spin_ns, .timeout_ns = WAIT_SLICE_NS};
    for (;;) {
        guild_wait_result_t w = guild_doorbell_wait(&sh->response, seq, &pol, NULL, NULL, "step response", err);
        if (w == GUILD_WAIT_OK)
            break;
        if (w == GUILD_WAIT_ERROR)
            return -1;
        int c = sup_check(r->sup, r->epoch, err);
        if (c)
            return c;
    }
    if (sh->resp.seq != seq)
        return guild_err_set(err, "step region: response to request %llu, expected %llu",
                             (unsigned long long)sh->resp.seq, (unsigned long long)seq);
    return 0;
}

/* Rings one request and waits for its answer: tokens[0..n) of sequences seqs[] (NULL: sequence 0 only) at
 * positions pos[] (each sequence's rows from its first row's position on, which is where its cache is cut first).
 * 0: answered OK (logits in the step region); 1: the GPU worker was lost before answering; -1 with err: it failed
 * the request, or the pipeline failed. */
static int issue(remote_t *r, const int32_t *tokens, const int32_t *seqs, const int32_t *pos, int32_t n,
                 int32_t n_out, const int32_t *rows, guild_err_t *err)
{
    guild_step_t *st = r->st;
    guild_step_shared_t *sh = st->sh;
    memcpy(st->tokens, tokens, (size_t)n * sizeof *tokens);
    if (n_out)
        memcpy(st->out_rows, rows, (size_t)n_out * sizeof *rows);
    const bool pick = r->pick && n_out > 0; /* a replay wants no rows */
    if (pick)
        memcpy(st->full, r->c_full, (size_t)n_out);
    guild_step_request_t req;
    if (r->o.n_seq > 1) { /* the one-sequence request stays the old one */
        for (int32_t i = 0; i < n; i++)
            st->seq_ids[i] = seqs ? seqs[i] : 0;
        memcpy(st->positions, pos, (size_t)n * sizeof *pos);
        req = (guild_step_request_t){.n_tokens = n, .n_out = n_out, .flags = GUILD_STEP_SEQS};
    } else {
        req = (guild_step_request_t){.keep = pos[0], .n_tokens = n, .n_out = n_out};
    }
    if (pick)
        req.flags |= GUILD_STEP_PICK;
    uint64_t t0 = guild_now_ns();
    int rc = ring(r, &req, err);
    if (rc)
        return rc;
    const guild_step_response_t *resp = &sh->resp;
    uint64_t wall = guild_now_ns() - t0;
    r->stats.requests++;
    r->stats.exchanges += resp->exchanges;
    r->stats.forward_ns += resp->forward_ns;
    r->stats.moe_ns += resp->moe_ns;
    r->stats.wall_ns += wall;
    if (n == 1) {
        r->stats.decode_requests++;
        r->stats.decode_exchanges += resp->exchanges;
        r->stats.decode_forward_ns += resp->forward_ns;
        r->stats.decode_moe_ns += resp->moe_ns;
        r->stats.decode_wall_ns += wall;
    }
    if (resp->status != GUILD_STEP_OK) {
        /* the GPU worker's caches of the request's sequences are back to where their rows began (a recurrent
         * one's empty) */
        for (int32_t i = n - 1; i >= 0; i--) {
            rseq_t *q = &r->sq[seqs ? seqs[i] : 0];
            q->gpu_len = r->o.recurrent ? 0 : pos[i];
            q->rb_n = 0;
        }
        /* aborted by the supervisor: its reason says more than the GPU worker's "aborted" */
        if (resp->status == GUILD_STEP_ABORTED && sup_check(r->sup, r->epoch, err) < 0)
            return -1;
        char msg[GUILD_STEP_MESSAGE_MAX];
        memcpy(msg, resp->message, sizeof msg);
        msg[sizeof msg - 1] = '\0';
        return guild_err_set(err, "%s", msg);
    }
    for (int32_t i = 0; i < n; i++)
        r->sq[seqs ? seqs[i] : 0].rb_n = -1; /* the request's sequences */
    for (int32_t i = 0; i < n; i++) { /* a sequence's first row sets where its rows began, each counts */
        rseq_t *q = &r->sq[seqs ? seqs[i] : 0];
        if (q->rb_n < 0) {
            q->rb_from = pos[i];
            q->rb_n = 0;
        }
        q->rb_n++;
        q->gpu_len = pos[i] + 1;
    }
    for (int32_t i = 0; i < n; i++) {
        rseq_t *q = &r->sq[seqs ? seqs[i] : 0];
        if (q->rb_n > r->o.rollback)
            q->rb_n = 0; /* a longer request: no states kept */
    }
    return 0;
}

/* Refills the current GPU worker's cache of sequence q from its history. 0, 1 (lost), -1. */
static int replay(remote_t *r, int32_t q, guild_err_t *err)
{
    rseq_t *sq = &r->sq[q];
    int rc = 0;
    if (sq->gpu_len < sq->kv_len) {
        r->stats.replays++;
        guild_log(GUILD_LOG_INFO, "replaying %d tokens into the GPU worker's cache", sq->kv_len - sq->gpu_len);
    }
    while (rc == 0 && sq->gpu_len < sq->kv_len) {
        int32_t m = sq->kv_len - sq->gpu_len < r->o.n_batch ? sq->kv_len - sq->gpu_len : r->o.n_batch;
        int32_t from = sq->gpu_len;
        for (int32_t i = 0; i < m; i++) {
            r->r_seq[i] = q;
            r->r_pos[i] = from + i;
        }
        rc = issue(r, sq->history + from, r->r_seq, r->r_pos, m, 0, NULL, err);
        if (rc == 0)
            r->stats.replayed += (uint64_t)m;
    }
    return rc;
}

/* Makes sure of a GPU worker that is up, waiting for one if needed (a new one holds no cache). -1 with err. */
static int current_worker(remote_t *r, guild_err_t *err)
{
    int c = r->epoch ? sup_check(r->sup, r->epoch, err) : 1;
    if (c < 0)
        return -1;
    if (c > 0) {
        uint64_t ep;
        if (sup_wait_ready(r->sup, r->o.ready_ms, &ep, err) < 0)
            return -1;
        if (ep != r->epoch) {
            r->epoch = ep;
            for (int32_t q = 0; q < r->o.n_seq; q++)
                r->sq[q].gpu_len = 0;
        }
    }
    return 0;
}

/* Runs the chunk tokens[0..n) of sequences seqs[] at positions pos[] (n_out rows wanted), refilling a new GPU
 * worker's caches of the chunk's sequences first. */
static int run_chunk(remote_t *r, const int32_t *tokens, const int32_t *seqs, const int32_t *pos, int32_t n,
                     int32_t n_out, const int32_t *rows, guild_err_t *err)
{
    int losses = 0;
    for (;;) {
        if (current_worker(r, err) < 0)
            return -1;
        int rc = 0;
        for (int32_t q = 0; rc == 0 && q < r->o.n_seq; q++)
            if (r->sq[q].rows)
                rc = replay(r, q, err);
        if (rc == 0)
            rc = issue(r, tokens, seqs, pos, n, n_out, rows, err);
        if (rc <= 0)
            return rc;
        if (++losses > r->o.max_retries)
            return guild_err_set(err, "the GPU worker was lost %d times during one forward call; giving up", losses);
        guild_log(GUILD_LOG_WARN, "the GPU worker was lost during a forward call; retrying (%d of %d)", losses,
                  r->o.max_retries);
        r->epoch = 0;
    }
}

/* A forward call; picks non-NULL: a pick call (backend_forward_pick), whose rows come back as picks and the logits
 * of the rows full[] names. */
static int forward_rows(remote_t *r, int32_t n, const int32_t *tokens, const int32_t *seqs, const int32_t *positions,
                        int32_t n_out, const int32_t *out_rows, const uint8_t *full, float *logits,
                        logits_pick_t *picks, guild_err_t *err)
{
    if (n < 1 || n > r->o.n_batch)
        return guild_err_set(err, "forward: %d tokens in a batch (1..%d)", n, r->o.n_batch);
    for (int32_t q = 0; q < r->o.n_seq; q++)
        r->sq[q].rows = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t q = seqs ? seqs[i] : 0;
        if (q < 0 || q >= r->o.n_seq)
            return guild_err_set(err, "forward: token %d is of sequence %d (the backend holds %d)", i, q, r->o.n_seq);
        rseq_t *sq = &r->sq[q];
        if (sq->kv_len + sq->rows >= r->o.n_ctx)
            return guild_err_set(err, "forward: the KV cache is full (%d + %d positions > %d)", sq->kv_len,
                                 sq->rows + 1, r->o.n_ctx);
        if (positions[i] != sq->kv_len + sq->rows)
            return guild_err_set(err, "forward: token %d has position %d, expected %d", i, positions[i],
                                 sq->kv_len + sq->rows);
        if (tokens[i] < 0 || tokens[i] >= r->o.n_vocab)
            return guild_err_set(err, "forward: token id %d out of range (vocabulary of %d)", tokens[i],
                                 r->o.n_vocab);
        sq->rows++;
    }
    if (n_out < 0 || n_out > n)
        return guild_err_set(err, "forward: %d output rows for %d tokens", n_out, n);
    for (int32_t j = 0; j < n_out; j++)
        if (out_rows[j] < 0 || out_rows[j] >= n)
            return guild_err_set(err, "forward: output row %d out of range (0..%d)", out_rows[j], n - 1);

    for (int32_t q = 0; q < r->o.n_seq; q++)
        r->sq[q].start = r->sq[q].kv_len;
    const int32_t max_out = (int32_t)r->st->shape.max_out, V = r->o.n_vocab;
    int32_t s = 0;
    while (s < n) {
        /* the chunk [s, e): as long as its distinct rows wanting logits fit one request */
        int32_t e = s, nr = 0;
        while (e < n) {
            bool wanted = false;
            for (int32_t j = 0; j < n_out && !wanted; j++)
                wanted = out_rows[j] == e;
            if (wanted && nr == max_out)
                break;
            if (wanted) {
                r->c_full[nr] = 0;
                for (int32_t j = 0; full && j < n_out; j++)
                    if (out_rows[j] == e && full[j])
                        r->c_full[nr] = 1;
                r->rows[nr++] = e - s;
            }
            e++;
        }
        for (int32_t q = 0; q < r->o.n_seq; q++)
            r->sq[q].rows = 0;
        for (int32_t i = s; i < e; i++) {
            const int32_t q = seqs ? seqs[i] : 0;
            r->c_seq[i - s] = q;
            r->c_pos[i - s] = positions[i];
            r->sq[q].rows++;
        }
        r->pick = picks != NULL;
        const int rc = run_chunk(r, tokens + s, r->c_seq, r->c_pos, e - s, nr, r->rows, err);
        r->pick = false;
        if (rc < 0) {
            for (int32_t q = 0; q < r->o.n_seq; q++) {
                rseq_t *sq = &r->sq[q];
                sq->kv_len = sq->start;
                if (sq->gpu_len > sq->start)
                    sq->gpu_len = sq->start;
            }
            return -1;
        }
        for (int32_t j = 0; j < n_out; j++)
            for (int32_t k = 0; k < nr; k++)
                if (out_rows[j] == s + r->rows[k]) {
                    if (picks)
                        picks[j] = r->st->picks[k];
                    if (!picks || r->c_full[k]) /* a pick call's sampled rows only */
                        memcpy(logits + (size_t)j * (size_t)V, r->st->logits + (size_t)k * (size_t)V,
                               (size_t)V * sizeof *logits);
                }
        for (int32_t i = s; i < e; i++) {
            rseq_t *sq = &r->sq[seqs ? seqs[i] : 0];
            sq->history[sq->kv_len++] = tokens[i];
        }
        s = e;
    }
    return 0;
}

static int remote_forward_seq(backend_t *b, int32_t n, const int32_t *tokens, const int32_t *seqs,
                              const int32_t *positions, int32_t n_out, const int32_t *out_rows, float *logits,
                              guild_err_t *err)
{
    return forward_rows((remote_t *)b, n, tokens, seqs, positions, n_out, out_rows, NULL, logits, NULL, err);
}

static int remote_forward_pick(backend_t *b, int32_t n, const int32_t *tokens, const int32_t *seqs,
                               const int32_t *positions, int32_t n_out, const int32_t *out_rows, const uint8_t *full,
                               float *logits, logits_pick_t *picks, guild_err_t *err)
{
    return forward_rows((remote_t *)b, n, tokens, seqs, positions, n_out, out_rows, full, logits, picks, err);
}

static int remote_forward(backend_t *b, int32_t n, const int32_t *tokens, const int32_t *positions, int32_t n_out,
                          const int32_t *out_rows, float *logits, guild_err_t *err)
{
    return remote_forward_seq(b, n, tokens, NULL, positions, n_out, out_rows, logits, err);
}

/* The failure of a snapshot request: the worker's message, or a loss (then a new worker is waited for next). */
static int state_failed(remote_t *r, int rc, guild_err_t *err)
{
    if (rc < 0)
        return -1;
    if (rc > 0) {
        r->epoch = 0;
        return guild_err_set(err, "the GPU worker was lost during a snapshot transfer");
    }
    char msg[GUILD_STEP_MESSAGE_MAX];
    memcpy(msg, r->st->sh->resp.message, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    return guild_err_set(err, "%s", msg);
}

/* The snapshot comes from the GPU worker in chunks through the logits area (ipc/step.h), after its cache of
 * the positions is refilled if it was lost. */
static int remote_seq_save(backend_t *b, int32_t q, int32_t n_pos, void **out, size_t *size, guild_err_t *err)
{
    remote_t *r = (remote_t *)b;
    rseq_t *sq = &r->sq[q];
    if (current_worker(r, err) < 0)
        return -1;
    int rc = sq->gpu_len < n_pos ? replay(r, q, err) : 0;
    if (rc)
        return state_failed(r, rc, err);
    if (sq->gpu_len < n_pos)
        return guild_err_set(err, "snapshot: the GPU worker holds %d positions of sequence %d, %d asked",
                             sq->gpu_len, q, n_pos);
    char *blob = NULL;
    uint64_t total = 1, have = 0;
    while (have < total) {
        guild_step_request_t req = {.flags = GUILD_STEP_SAVE, .state_seq = q, .state_n = n_pos, .state_offset = have};
        rc = ring(r, &req, err);
        const guild_step_response_t *resp = &r->st->sh->resp;
        if (rc || resp->status != GUILD_STEP_OK) {
            free(blob);
            return state_failed(r, rc, err);
        }
        if (!blob) {
            total = resp->state_total;
            if (total == 0 || !(blob = malloc((size_t)total)))
                return guild_err_set(err, "snapshot: no room for %llu bytes", (unsigned long long)total);
        }
        if (resp->state_total != total || resp->chunk_bytes == 0 || resp->chunk_bytes > total - have) {
            free(blob);
            return guild_err_set(err, "snapshot: a chunk of %llu bytes at %llu of %llu", 
                                 (unsigned long long)resp->chunk_bytes, (unsigned long long)have,
                                 (unsigned long long)resp->state_total);
        }
        memcpy(blob + have, r->st->logits, (size_t)resp->chunk_bytes);
        have += resp->chunk_bytes;
    }
    *out = blob;
    *size = (size_t)total;
    return 0;
}

/* The snapshot goes to the GPU worker in chunks; the sequence's history becomes its tokens, for a replay. */
static int remote_seq_load(backend_t *b, int32_t q, const int32_t *tokens, int32_t n_pos, const void *blob,
                           size_t size, guild_err_t *err)
{
    remote_t *r = (remote_t *)b;
    rseq_t *sq = &r->sq[q];
    if (!tokens)
        return guild_err_set(err, "snapshot: the multi-process pipeline needs the restored positions' tokens");
    if (n_pos > r->o.n_ctx)
        return guild_err_set(err, "snapshot: %d positions, the context holds %d", n_pos, r->o.n_ctx);
    if (current_worker(r, err) < 0)
        return -1;
    const size_t window = (size_t)r->st->shape.max_out * r->st->shape.n_vocab * sizeof(float);
    for (size_t have = 0; have < size;) {
        const size_t n = size - have < window ? size - have : window;
        memcpy(r->st->logits, (const char *)blob + have, n);
        guild_step_request_t req = {.flags = GUILD_STEP_LOAD, .state_seq = q, .state_n = n_pos,
                                    .state_offset = have, .state_total = size, .chunk_bytes = n};
        int rc = ring(r, &req, err);
        if (rc || r->st->sh->resp.status != GUILD_STEP_OK)
            return state_failed(r, rc, err); /* the worker's cache is as it was */
        have += n;
    }
    memcpy(sq->history, tokens, (size_t)n_pos * sizeof *tokens);
    sq->kv_len = n_pos;
    sq->gpu_len = n_pos;
    sq->rb_n = 0;
    return 0;
}

/* Rings step `step` of the GPU worker's multi-token-prediction layer (ipc/step.h GUILD_STEP_MTP) with `token`, the
 * worker's cache cut to the coordinator's view of sequence 0 first. 0: answered OK (logits in row 0); 1: the worker
 * was lost; -1 with err: it failed the step, or the pipeline failed. */
static int mtp_issue(remote_t *r, int32_t step, int32_t token, guild_err_t *err)
{
    r->st->tokens[0] = token;
    guild_step_request_t req = {.flags = GUILD_STEP_MTP, .keep = r->sq[0].kv_len, .n_tokens = 1, .state_n = step};
    const int rc = ring(r, &req, err);
    if (rc)
        return rc;
    const guild_step_response_t *resp = &r->st->sh->resp;
    if (resp->status != GUILD_STEP_OK) {
        char msg[GUILD_STEP_MESSAGE_MAX];
        memcpy(msg, resp->message, sizeof msg);
        msg[sizeof msg - 1] = '\0';
        return guild_err_set(err, "%s", msg);
    }
    r->stats.requests++;
    return 0;
}

/* A step of the GPU worker's multi-token-prediction layer, its cache first made the coordinator's view of sequence
 * 0 (refilled after a loss; `keep` cuts what a truncation left). A worker that did not take the draft's earlier
 * steps (one that replaced a lost one) takes them again first, with the tokens they had: a draft survives
 * max_retries losses, as a forward call does. */
static int remote_mtp_step(backend_t *b, int32_t step, int32_t token, float *logits, guild_err_t *err)
{
    remote_t *r = (remote_t *)b;
    rseq_t *sq = &r->sq[0];
    if (token < 0 || token >= r->o.n_vocab)
        return guild_err_set(err, "mtp: token id %d is out of range (vocabulary of %d)", token, r->o.n_vocab);
    if (step == 0)
        r->mtp_n = 0;
    if (step != r->mtp_n || step >= REMOTE_MTP_STEPS)
        return guild_err_set(err, "mtp: step %d asked, step %d comes next (at most %d)", step, r->mtp_n,
                             REMOTE_MTP_STEPS);
    int losses = 0;
    for (;;) {
        if (current_worker(r, err) < 0)
            return -1;
        int rc = sq->gpu_len < sq->kv_len ? replay(r, 0, err) : 0;
        for (int32_t j = step > 0 && r->mtp_epoch == r->epoch ? step : 0; rc == 0 && j <= step; j++)
            rc = mtp_issue(r, j, j < step ? r->mtp_tok[j] : token, err);
        if (rc < 0)
            return -1;
        if (rc == 0)
            break;
        if (++losses > r->o.max_retries)
            return guild_err_set(err, "mtp: the GPU worker was lost %d times during one step; giving up", losses);
        guild_log(GUILD_LOG_WARN, "the GPU worker was lost during a multi-token-prediction step; retrying (%d of %d)",
                  losses, r->o.max_retries);
        r->epoch = 0;
    }
    r->mtp_tok[step] = token;
    r->mtp_n = step + 1;
    r->mtp_epoch = r->epoch;
    memcpy(logits, r->st->logits, (size_t)r->o.n_vocab * sizeof *logits);
    return 0;
}

static int32_t remote_seq_kv_len(const backend_t *b, int32_t q)
{
    return ((const remote_t *)b)->sq[q].kv_len;
}

static void remote_seq_kv_truncate(backend_t *b, int32_t q, int32_t n_pos)
{
    remote_t *r = (remote_t *)b;
    rseq_t *sq = &r->sq[q];
    if (n_pos < 0)
        n_pos = 0;
    if (n_pos < sq->kv_len && r->o.recurrent) {
        /* back into the GPU worker's last request of the sequence, whose states it kept: its backend restores the
         * state there when the next request's keep cuts its cache (the GPU worker's cache must be that request's) */
        const int32_t j = n_pos - sq->rb_from - 1;
        if (sq->gpu_len == sq->kv_len && j >= 0 && j < sq->rb_n) {
            sq->rb_n = j + 1;
        } else {
            n_pos = 0;
            sq->rb_n = 0;
        }
    }
    if (n_pos < sq->kv_len)
        sq->kv_len = n_pos; /* the next request's `keep` (its first position) tells the GPU worker */
    if (sq->gpu_len > sq->kv_len)
        sq->gpu_len = sq->kv_len;
}

static int32_t remote_kv_len(const backend_t *b)
{
    return remote_seq_kv_len(b, 0);
}

static void remote_kv_truncate(backend_t *b, int32_t n_pos)
{
    remote_seq_kv_truncate(b, 0, n_pos);
}

static void remote_destroy(backend_t *b)
{
    remote_t *r = (remote_t *)b;
    for (int32_t q = 0; r->sq && q < r->o.n_seq; q++)
        free(r->sq[q].history);
    free(r->sq);
    free(r->rows);
    free(r->c_full);
    free(r->c_seq);
    free(r->c_pos);
    free(r->r_seq);
    free(r->r_pos);
    free(r);
}

/* The GPU worker's streaming counters, as its Stats carry them. */
static void remote_stats(const backend_t *b, backend_stats_t *out)
{
    sup_gpu_stats(((const remote_t *)b)->sup, out);
}

/* The GPU worker's routing counts, as its Stats carry them. */
static int remote_routing(const backend_t *b, uint64_t *counts)
{
    return sup_gpu_routing(((const remote_t *)b)->sup, counts);
}

static const backend_ops_t remote_ops = {
    .name = "remote",
    .create = NULL, /* made by remote_backend_new, not by name */
    .forward = remote_forward,
    .kv_len = remote_kv_len,
    .kv_truncate = remote_kv_truncate,
    .forward_seq = remote_forward_seq,
    .forward_pick = remote_forward_pick,
    .seq_kv_len = remote_seq_kv_len,
    .seq_kv_truncate = remote_seq_kv_truncate,
    .seq_save = remote_seq_save,
    .seq_load = remote_seq_load,
    .destroy = remote_destroy,
    .stats = remote_stats,
    .routing = remote_routing,
    .mtp_step = remote_mtp_step,
};

int remote_backend_new(backend_t **out, sup_t *sup, const remote_options_t *opt, guild_err_t *err)
{
    *out = NULL;
    remote_t *r = calloc(1, sizeof *r);
    if (!r)
        return guild_err_set(err, "remote backend: out of memory");
    r->base.ops = &remote_ops;
    r->sup = sup;
    r->st = sup_step(sup);
    r->o = *opt;
    if (r->o.n_seq < 1)
        r->o.n_seq = 1;
    r->base.n_seq = r->o.n_seq;
    GUILD_ASSERT((uint32_t)opt->n_batch <= r->st->shape.max_tokens && (uint32_t)opt->n_vocab == r->st->shape.n_vocab);
    r->seq = guild_doorbell_load(&r->st->sh->request);
    r->sq = calloc((size_t)r->o.n_seq, sizeof *r->sq);
    r->rows = malloc((size_t)r->st->shape.max_out * sizeof *r->rows);
    r->c_full = malloc((size_t)r->st->shape.max_out);
    r->c_seq = malloc((size_t)opt->n_batch * sizeof *r->c_seq);
    r->c_pos = malloc((size_t)opt->n_batch * sizeof *r->c_pos);
    r->r_seq = malloc((size_t)opt->n_batch * sizeof *r->r_seq);
    r->r_pos = malloc((size_t)opt->n_batch * sizeof *r->r_pos);
    bool ok = r->sq && r->rows && r->c_full && r->c_seq && r->c_pos && r->r_seq && r->r_pos;
    for (int32_t q = 0; ok && q < r->o.n_seq; q++)
        ok = (r->sq[q].history = malloc((size_t)opt->n_ctx * sizeof *r->sq[q].history)) != NULL;
    if (!ok) {
        remote_destroy(&r->base);
        return guild_err_set(err, "remote backend: out of memory for %d contexts of %d", r->o.n_seq, opt->n_ctx);
    }
    *out = &r->base;
    return 0;
}

void remote_backend_stats(const backend_t *b, remote_stats_t *out)
{
    *out = ((const remote_t *)b)->stats;
}

void remote_stats_take(backend_stats_t *out, const Guild__Stats *st)
{
    out->streamed_layers = st->streamed_layers;
    out->streamed_bytes = st->streamed_bytes;
    out->split_gpu_experts = st->split_gpu_experts;
    out->split_cpu_experts = st->split_cpu_experts;
    out->split_gpu_pairs = st->split_gpu_pairs;
    out->split_cpu_pairs = st->split_cpu_pairs;
    out->staged_bytes = st->staged_bytes;
    out->stage_wait_ns = st->stage_wait_ns;
    out->routed_pairs = st->routed_pairs;
    out->resident_pairs = st->resident_pairs;
    out->stream_passes = st->stream_passes;
    out->stream_span_ns = st->stream_span_ns;
    out->copy_busy_ns = st->copy_busy_ns;
    out->copy_wait_ns = st->copy_wait_ns;
    out->cpu_wait_ns = st->cpu_wait_ns;
    out->hint_experts = st->hint_experts;
    out->hint_hits = st->hint_hits;
    out->prefetch_bytes = st->prefetch_bytes;
    out->prefetch_layers = st->prefetch_layers;
    out->turnaround_ns = st->turnaround_ns;
    out->turnarounds = st->turnarounds;
}
