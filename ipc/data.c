#include "config.h"

#include "ipc/data.h"

#include <stdlib.h>
#include <string.h>
#include <zmq.h>

void *data_dealer_new(void *zctx, const char *endpoint, const char *identity, const guild_curve_t *curve,
                      guild_err_t *err)
{
    const guild_msg_socket_opts_t o = {.curve = curve};
    void *s = guild_msg_socket_new(zctx, false, endpoint, identity, &o, err);
    if (!s)
        guild_err_prefix(err, "data socket: ");
    return s;
}

void *data_router_new(void *zctx, const char *endpoint, const guild_curve_t *curve, guild_err_t *err)
{
    const guild_msg_socket_opts_t o = {.curve = curve};
    void *s = guild_msg_socket_new(zctx, true, endpoint, NULL, &o, err);
    if (!s)
        guild_err_prefix(err, "data socket: ");
    return s;
}

_Static_assert(DATA_MAX_FRAMES + 1 <= GUILD_MSG_MAX_FRAMES, "a data message's frames fit guild_msg_frames_t");

/* Sends [to] hdr arrays... */
static int send_frames(void *sock, const guild_msg_peer_t *to, Guild__Data *d, const void *const *arr,
                       const size_t *len, int n_arr, guild_err_t *err)
{
    d->protocol_version = GUILD_PROTOCOL_VERSION;
    size_t hl = guild__data__get_packed_size(d);
    uint8_t *hb = malloc(hl ? hl : 1);
    if (!hb)
        return guild_err_set(err, "data socket: out of memory");
    guild__data__pack(d, hb);
    const void *frames[1 + DATA_MAX_FRAMES] = {hb};
    size_t lens[1 + DATA_MAX_FRAMES] = {hl};
    GUILD_ASSERT(n_arr < DATA_MAX_FRAMES);
    for (int i = 0; i < n_arr; i++) {
        frames[1 + i] = arr[i];
        lens[1 + i] = len[i];
    }
    const int rc = guild_msg_send_frames(sock, to, frames, lens, 1 + n_arr, "data socket: send", err);
    free(hb);
    return rc;
}

int data_send_hello(void *dealer, uint64_t generation, uint32_t worker, guild_err_t *err)
{
    Guild__Data d = GUILD__DATA__INIT;
    Guild__DataHello h = GUILD__DATA_HELLO__INIT;
    h.generation = generation;
    h.worker = worker;
    d.body_case = GUILD__DATA__BODY_HELLO;
    d.hello = &h;
    return send_frames(dealer, NULL, &d, NULL, NULL, 0, err);
}

int data_send_request(void *router, const guild_msg_peer_t *to, uint64_t seq, int32_t layer, uint32_t n_tokens,
                      uint32_t n_used, uint32_t n_embd, const float *x, const int32_t *ids, guild_err_t *err)
{
    Guild__Data d = GUILD__DATA__INIT;
    Guild__ExchangeRequest r = GUILD__EXCHANGE_REQUEST__INIT;
    r.seq = seq;
    r.layer = layer;
    r.n_tokens = n_tokens;
    r.n_used = n_used;
    r.n_embd = n_embd;
    d.body_case = GUILD__DATA__BODY_REQUEST;
    d.request = &r;
    const void *arr[2] = {x, ids};
    size_t len[2] = {(size_t)n_tokens * n_embd * sizeof(float), (size_t)n_tokens * n_used * sizeof(int32_t)};
    return send_frames(router, to, &d, arr, len, 2, err);
}

int data_send_result(void *dealer, uint64_t seq, uint32_t n_pairs, const int32_t *pairs, const float *y,
                     uint32_t n_embd, guild_err_t *err)
{
    Guild__Data d = GUILD__DATA__INIT;
    Guild__ExchangeResult r = GUILD__EXCHANGE_RESULT__INIT;
    r.seq = seq;
    r.n_pairs = n_pairs;
    d.body_case = GUILD__DATA__BODY_RESULT;
    d.result = &r;
    const void *arr[2] = {pairs, y};
    size_t len[2] = {(size_t)n_pairs * sizeof(int32_t), (size_t)n_pairs * n_embd * sizeof(float)};
    return send_frames(dealer, NULL, &d, arr, len, 2, err);
}

int data_send_shard_read(void *dealer, uint64_t generation, uint32_t worker, uint64_t offset, uint64_t length,
                         guild_err_t *err)
{
    Guild__Data d = GUILD__DATA__INIT;
    Guild__ShardRead r = GUILD__SHARD_READ__INIT;
    r.generation = generation;
    r.worker = worker;
    r.offset = offset;
    r.length = length;
    d.body_case = GUILD__DATA__BODY_SHARD_READ;
    d.shard_read = &r;
    return send_frames(dealer, NULL, &d, NULL, NULL, 0, err);
}

int data_send_shard_data(void *router, const guild_msg_peer_t *to, uint64_t offset, uint64_t length,
                         uint64_t file_size, uint64_t data_offset, const void *bytes, const char *error,
                         guild_err_t *err)
{
    Guild__Data d = GUILD__DATA__INIT;
    Guild__ShardData r = GUILD__SHARD_DATA__INIT;
    r.offset = offset;
    r.length = error ? 0 : length;
    r.file_size = file_size;
    r.data_offset = data_offset;
    r.error = (char *)(error ? error : "");
    d.body_case = GUILD__DATA__BODY_SHARD_DATA;
    d.shard_data = &r;
    const void *arr[1] = {bytes};
    size_t len[1] = {(size_t)r.length};
    return send_frames(router, to, &d, arr, len, r.length ? 1 : 0, err);
}

void data_msg_close(data_msg_t *m)
{
    if (m->hdr)
        guild__data__free_unpacked(m->hdr, NULL);
    if (m->frames_) {
        guild_msg_frames_close(m->frames_);
        free(m->frames_);
    }
    free(m->copy_[0]);
    free(m->copy_[1]);
    memset(m, 0, sizeof *m);
}

/* Checks the arrays (frames first.. of f) against the header. */
static int check(data_msg_t *m, guild_msg_frames_t *f, int first, guild_err_t *err)
{
    const int n_arr = f->n_total - first;
    const Guild__Data *d = m->hdr;
    size_t want[2] = {0, 0};
    int n_want = 0;
    switch (d->body_case) {
    case GUILD__DATA__BODY_HELLO:
        break;
    case GUILD__DATA__BODY_REQUEST: {
        const Guild__ExchangeRequest *r = d->request;
        if (r->n_tokens > (1u << 20) || r->n_embd == 0 || r->n_embd > (1u << 20) || r->n_used == 0 || r->n_used > 1024)
            return guild_err_set(err, "exchange request: implausible shape (%u tokens, width %u, top-%u)",
                                 r->n_tokens, r->n_embd, r->n_used);
        want[0] = (size_t)r->n_tokens * r->n_embd * sizeof(float);
        want[1] = (size_t)r->n_tokens * r->n_used * sizeof(int32_t);
        n_want = 2;
        break;
    }
    case GUILD__DATA__BODY_RESULT: {
        const Guild__ExchangeResult *r = d->result;
        if (r->n_pairs > (1u << 26))
            return guild_err_set(err, "exchange result: implausible %u pairs", r->n_pairs);
        want[0] = (size_t)r->n_pairs * sizeof(int32_t);
        n_want = 2;
        want[1] = n_arr == 2 && r->n_pairs ? guild_msg_frame_size(f, first + 1) : 0; /* width checked by the user */
        if (r->n_pairs && want[1] % ((size_t)r->n_pairs * sizeof(float)))
            return guild_err_set(err, "exchange result: %zu bytes of y for %u pairs", want[1], r->n_pairs);
        break;
    }
    case GUILD__DATA__BODY_SHARD_READ:
        break;
    case GUILD__DATA__BODY_SHARD_DATA:
        if (d->shard_data->length > DATA_MAX_SHARD_BYTES)
            return guild_err_set(err, "shard data: %llu bytes in one message",
                                 (unsigned long long)d->shard_data->length);
        want[0] = (size_t)d->shard_data->length;
        n_want = want[0] ? 1 : 0;
        if (n_arr == 1 && n_want == 1 && guild_msg_frame_size(f, first) == want[0]) {
            m->array[0] = guild_msg_frame_data(f, first); /* bytes: no alignment needed */
            return 0;
        }
        break;
    default:
        return guild_err_set(err, "data message without a known body (field %d)", (int)d->body_case);
    }
    if (n_arr != n_want)
        return guild_err_set(err, "data message: %d arrays, expected %d", n_arr, n_want);
    for (int i = 0; i < n_arr; i++) {
        if (guild_msg_frame_size(f, first + i) != want[i])
            return guild_err_set(err, "data message: array %d has %zu bytes, expected %zu", i,
                                 guild_msg_frame_size(f, first + i), want[i]);
        m->array[i] = guild_msg_frame_data(f, first + i);
        /* ZeroMQ keeps no alignment promise (small frames live inside the message object): floats and ints
         * read in place would be misaligned loads */
        if ((uintptr_t)m->array[i] % 64 && want[i]) {
            if (!(m->copy_[i] = aligned_alloc(64, (want[i] + 63) & ~(size_t)63)))
                return guild_err_set(err, "data message: out of memory");
            memcpy(m->copy_[i], m->array[i], want[i]);
            m->array[i] = m->copy_[i];
        }
    }
    return 0;
}

guild_msg_result_t data_recv(void *sock, int timeout_ms, data_msg_t *m, guild_err_t *err)
{
    memset(m, 0, sizeof *m);
    int type;
    size_t tl = sizeof type;
    zmq_getsockopt(sock, ZMQ_TYPE, &type, &tl);
    const int first = type == ZMQ_ROUTER; /* the header's frame: after the sender's routing id on a ROUTER */
    guild_msg_frames_t *f = malloc(sizeof *f);
    if (!f) {
        guild_err_set(err, "data socket: out of memory");
        return GUILD_MSG_ERROR;
    }
    const guild_msg_result_t r = guild_msg_recv_frames(sock, timeout_ms, f, err);
    if (r != GUILD_MSG_OK) {
        free(f);
        if (r == GUILD_MSG_ERROR)
            guild_err_prefix(err, "data socket: ");
        return r;
    }
    m->frames_ = f;
    if (first) {
        size_t il = guild_msg_frame_size(f, 0);
        if (il > 0 && il <= GUILD_MSG_MAX_IDENTITY) {
            memcpy(m->from.id, guild_msg_frame_data(f, 0), il);
            m->from.len = il;
        }
        if (f->n_kept > 1)
            guild_msg_frame_user(f, 1, m->from.user, sizeof m->from.user);
    }
    guild_msg_peer_t from = m->from;
    if (f->n_total > DATA_MAX_FRAMES + 1 || f->n_total <= first) {
        guild_err_set(err, "data message of %d frames", f->n_total - first);
        goto bad;
    }
    size_t hl = guild_msg_frame_size(f, first);
    if (hl > GUILD_MSG_MAX_BYTES || !(m->hdr = guild__data__unpack(NULL, hl, guild_msg_frame_data(f, first)))) {
        guild_err_set(err, "malformed data message header (%zu bytes)", hl);
        goto bad;
    }
    if (m->hdr->protocol_version != GUILD_PROTOCOL_VERSION) {
        guild_err_set(err, "data message of protocol version %u, this build speaks %u", m->hdr->protocol_version,
                      GUILD_PROTOCOL_VERSION);
        goto bad;
    }
    if (check(m, f, first + 1, err) < 0)
        goto bad;
    return GUILD_MSG_OK;
bad:
    data_msg_close(m);
    m->from = from;
    return GUILD_MSG_BAD;
}

int data_endpoint_resolve(const char *data_endpoint, const char *control_endpoint, char *out, size_t size,
                          guild_err_t *err)
{
    const char *star = strstr(data_endpoint, "://*:");
    if (!star || strncmp(control_endpoint, "tcp://", 6) != 0) {
        if ((size_t)snprintf(out, size, "%s", data_endpoint) >= size)
            return guild_err_set(err, "data endpoint %s is too long", data_endpoint);
        return 0;
    }
    const char *host = control_endpoint + 6, *colon = strrchr(host, ':');
    size_t hl = colon ? (size_t)(colon - host) : strlen(host);
    if ((size_t)snprintf(out, size, "tcp://%.*s%s", (int)hl, host, star + 4) >= size)
        return guild_err_set(err, "data endpoint %s is too long", data_endpoint);
    return 0;
}
