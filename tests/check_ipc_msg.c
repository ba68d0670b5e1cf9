/* Tests for ipc/msg + proto/guild.proto: encode/decode of every message, a real ROUTER/DEALER pair over
 * ipc://, and rejection of garbage, truncation, wrong versions, bad framing and oversized messages (the
 * receiver must survive all of it and keep serving). */
#include "config.h"

#include "core/util/err.h"
#include "ipc/msg.h"
#include "tests/check_run.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

static void *zctx;
static void *router;
static void *dealer;
static char endpoint[128];

static void pair_setup(void)
{
    guild_err_t err = {{0}};
    zctx = zmq_ctx_new();
    ck_assert_ptr_nonnull(zctx);
    snprintf(endpoint, sizeof endpoint, "ipc:///tmp/guild-check-ipc-msg-%d.sock", (int)getpid());
    router = guild_msg_router_new(zctx, endpoint, &err);
    ck_assert_msg(router, "%s", err.msg);
    dealer = guild_msg_dealer_new(zctx, endpoint, "cpu-worker-0", &err);
    ck_assert_msg(dealer, "%s", err.msg);
}

static void pair_teardown(void)
{
    guild_msg_close(&dealer);
    guild_msg_close(&router);
    zmq_ctx_term(zctx);
    unlink(endpoint + strlen("ipc://"));
}

static Guild__Envelope *roundtrip_decode(Guild__Envelope *env)
{
    env->protocol_version = GUILD_PROTOCOL_VERSION;
    size_t len = guild__envelope__get_packed_size(env);
    uint8_t *buf = malloc(len);
    guild__envelope__pack(env, buf);
    guild_err_t err = {{0}};
    Guild__Envelope *out = guild_msg_decode(buf, len, &err);
    free(buf);
    ck_assert_msg(out, "%s", err.msg);
    return out;
}

START_TEST(test_encode_decode_every_body)
{
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    env.msg_id = 42;

    Guild__Capabilities caps = GUILD__CAPABILITIES__INIT;
    char *features[] = {"avx2", "avx512f"};
    caps.n_cpus = 16;
    caps.mem_bytes = 1ull << 40;
    caps.numa_nodes = 2;
    caps.n_cpu_features = 2;
    caps.cpu_features = features;
    caps.shared_memory = 1;
    Guild__Register reg = GUILD__REGISTER__INIT;
    reg.role = GUILD__ROLE__ROLE_CPU_WORKER;
    reg.node = 1;
    reg.pid = 4242;
    reg.hostname = "host-a";
    reg.capabilities = &caps;
    reg.protocol_version = GUILD_PROTOCOL_VERSION;
    env.body_case = GUILD__ENVELOPE__BODY_REGISTER_WORKER;
    env.register_worker = &reg;
    Guild__Envelope *d = roundtrip_decode(&env);
    ck_assert_int_eq(d->body_case, GUILD__ENVELOPE__BODY_REGISTER_WORKER);
    ck_assert_uint_eq(d->msg_id, 42);
    ck_assert_int_eq(d->register_worker->role, GUILD__ROLE__ROLE_CPU_WORKER);
    ck_assert_int_eq(d->register_worker->node, 1);
    ck_assert_int_eq(d->register_worker->pid, 4242);
    ck_assert_str_eq(d->register_worker->hostname, "host-a");
    ck_assert_uint_eq(d->register_worker->capabilities->mem_bytes, 1ull << 40);
    ck_assert_str_eq(d->register_worker->capabilities->cpu_features[1], "avx512f");
    ck_assert_str_eq(guild_msg_body_name(d), "register");
    guild_msg_free(&d);
    ck_assert_ptr_null(d);

    Guild__ExpertRange r0 = GUILD__EXPERT_RANGE__INIT, r1 = GUILD__EXPERT_RANGE__INIT;
    r0.first = 0;
    r0.count = 32;
    r1.first = 96;
    r1.count = 32;
    Guild__ExpertRange *ranges[] = {&r0, &r1};
    Guild__LayerShard l3 = GUILD__LAYER_SHARD__INIT;
    l3.layer = 3;
    l3.n_experts = 2;
    l3.experts = ranges;
    Guild__LayerShard *shard[] = {&l3};
    Guild__ArenaRef arena = GUILD__ARENA_REF__INIT;
    arena.name = "/proc/100/fd/7";
    arena.layout_version = 1;
    arena.size = 64ull << 20;
    arena.tag = 0xfeedfacecafebeefull;
    Guild__CpuWorkerOptions opts = GUILD__CPU_WORKER_OPTIONS__INIT;
    opts.n_threads = 8;
    opts.spin_ns = 20000;
    Guild__Assign as = GUILD__ASSIGN__INIT;
    as.model_path = "/models/m.gguf";
    as.worker_index = 1;
    as.n_shard = 1;
    as.shard = shard;
    as.arena = &arena;
    as.options_case = GUILD__ASSIGN__OPTIONS_CPU;
    as.cpu = &opts;
    as.generation = 5;
    env.body_case = GUILD__ENVELOPE__BODY_ASSIGN;
    env.assign = &as;
    d = roundtrip_decode(&env);
    ck_assert_str_eq(d->assign->model_path, "/models/m.gguf");
    ck_assert_uint_eq(d->assign->n_shard, 1);
    ck_assert_uint_eq(d->assign->shard[0]->layer, 3);
    ck_assert_uint_eq(d->assign->shard[0]->n_experts, 2);
    ck_assert_uint_eq(d->assign->shard[0]->experts[1]->first, 96);
    ck_assert_uint_eq(d->assign->arena->tag, 0xfeedfacecafebeefull);
    ck_assert_str_eq(d->assign->arena->name, "/proc/100/fd/7");
    ck_assert_int_eq(d->assign->options_case, GUILD__ASSIGN__OPTIONS_CPU);
    ck_assert_uint_eq(d->assign->cpu->spin_ns, 20000);
    guild_msg_free(&d);

    Guild__Ready ready = GUILD__READY__INIT;
    ready.generation = 5;
    ready.resident_bytes = 123;
    env.body_case = GUILD__ENVELOPE__BODY_READY;
    env.ready = &ready;
    d = roundtrip_decode(&env);
    ck_assert_uint_eq(d->ready->resident_bytes, 123);
    guild_msg_free(&d);

    Guild__Stats stats = GUILD__STATS__INIT;
    stats.exchanges = 77;
    stats.futex_sleeps = 3;
    Guild__Heartbeat hb = GUILD__HEARTBEAT__INIT;
    hb.seq = 9;
    hb.stats = &stats;
    env.body_case = GUILD__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    d = roundtrip_decode(&env);
    ck_assert_uint_eq(d->heartbeat->seq, 9);
    ck_assert_uint_eq(d->heartbeat->stats->exchanges, 77);
    guild_msg_free(&d);

    Guild__StatsRequest sreq = GUILD__STATS_REQUEST__INIT;
    env.body_case = GUILD__ENVELOPE__BODY_STATS_REQUEST;
    env.stats_request = &sreq;
    d = roundtrip_decode(&env);
    ck_assert_str_eq(guild_msg_body_name(d), "stats_request");
    guild_msg_free(&d);

    env.body_case = GUILD__ENVELOPE__BODY_STATS;
    env.stats = &stats;
    d = roundtrip_decode(&env);
    ck_assert_uint_eq(d->stats->futex_sleeps, 3);
    guild_msg_free(&d);

    Guild__Error e = GUILD__ERROR__INIT;
    e.code = GUILD__ERROR_CODE__ERROR_MODEL;
    e.message = "m.gguf: tensor blk.3.ffn_up_exps: type 39 is not supported";
    e.fatal = 0;
    env.body_case = GUILD__ENVELOPE__BODY_ERROR;
    env.error = &e;
    d = roundtrip_decode(&env);
    ck_assert_int_eq(d->error->code, GUILD__ERROR_CODE__ERROR_MODEL);
    ck_assert_str_eq(d->error->message, e.message);
    guild_msg_free(&d);

    Guild__Shutdown sd = GUILD__SHUTDOWN__INIT;
    sd.reason = "bye";
    env.body_case = GUILD__ENVELOPE__BODY_SHUTDOWN;
    env.shutdown = &sd;
    d = roundtrip_decode(&env);
    ck_assert_str_eq(d->shutdown->reason, "bye");
    guild_msg_free(&d);
    guild_msg_free(&d); /* NULL-safe */
}
END_TEST

static void expect_decode_error(const void *data, size_t len, const char *needle)
{
    guild_err_t err = {{0}};
    Guild__Envelope *d = guild_msg_decode(data, len, &err);
    ck_assert_msg(!d, "decoded, expected an error containing \"%s\"", needle);
    ck_assert_msg(strstr(err.msg, needle), "error \"%s\" lacks \"%s\"", err.msg, needle);
}

static size_t pack(Guild__Envelope *env, uint8_t *buf)
{
    return guild__envelope__pack(env, buf);
}

START_TEST(test_decode_rejects_bad_envelopes)
{
    uint8_t buf[256];
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Shutdown sd = GUILD__SHUTDOWN__INIT;
    env.body_case = GUILD__ENVELOPE__BODY_SHUTDOWN;
    env.shutdown = &sd;

    env.protocol_version = 99;
    char speaks[64];
    snprintf(speaks, sizeof speaks, "protocol version 99, this build speaks %u", GUILD_PROTOCOL_VERSION);
    expect_decode_error(buf, pack(&env, buf), speaks);
    env.protocol_version = 0; /* absent */
    expect_decode_error(buf, pack(&env, buf), "protocol version 0");

    Guild__Envelope empty = GUILD__ENVELOPE__INIT;
    empty.protocol_version = GUILD_PROTOCOL_VERSION;
    expect_decode_error(buf, pack(&empty, buf), "without a known body");

    /* a body from a newer peer (field 40, length-delimited, empty): unknown to us */
    size_t n = pack(&empty, buf);
    buf[n++] = 0xc2; /* varint of (40 << 3) | 2 */
    buf[n++] = 0x02;
    buf[n++] = 0;
    expect_decode_error(buf, n, "without a known body");

    Guild__Register reg = GUILD__REGISTER__INIT;
    reg.role = (Guild__Role)77;
    reg.pid = 1;
    env.protocol_version = GUILD_PROTOCOL_VERSION;
    env.body_case = GUILD__ENVELOPE__BODY_REGISTER_WORKER;
    env.register_worker = &reg;
    expect_decode_error(buf, pack(&env, buf), "unknown role 77");
    reg.role = GUILD__ROLE__ROLE_CPU_WORKER;
    reg.pid = 0;
    expect_decode_error(buf, pack(&env, buf), "invalid pid");

    Guild__Assign as = GUILD__ASSIGN__INIT;
    env.body_case = GUILD__ENVELOPE__BODY_ASSIGN;
    env.assign = &as;
    expect_decode_error(buf, pack(&env, buf), "no model path");

    expect_decode_error(buf, 0, "empty message");
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    expect_decode_error(junk, sizeof junk, "malformed envelope");
    uint8_t *big = calloc(GUILD_MSG_MAX_BYTES + 1, 1);
    expect_decode_error(big, GUILD_MSG_MAX_BYTES + 1, "exceeds");
    free(big);
}
END_TEST

START_TEST(test_decode_survives_random_and_truncated_input)
{
    /* every prefix of a valid message, and many random buffers: decode either succeeds (a prefix that ends
     * on a field boundary is a valid, shorter message) or fails cleanly; ASan builds check the memory */
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Register reg = GUILD__REGISTER__INIT;
    reg.role = GUILD__ROLE__ROLE_GPU_WORKER;
    reg.pid = 7;
    reg.hostname = "a-rather-long-hostname.example.org";
    env.protocol_version = GUILD_PROTOCOL_VERSION;
    env.body_case = GUILD__ENVELOPE__BODY_REGISTER_WORKER;
    env.register_worker = &reg;
    uint8_t buf[256];
    size_t len = pack(&env, buf);
    int rejected = 0;
    for (size_t cut = 0; cut < len; cut++) {
        guild_err_t err = {{0}};
        Guild__Envelope *d = guild_msg_decode(buf, cut, &err);
        rejected += d == NULL;
        guild_msg_free(&d);
    }
    ck_assert_int_ge(rejected, (int)len - 2);

    uint32_t s = 12345;
    int accepted = 0;
    for (int i = 0; i < 20000; i++) {
        uint8_t r[300];
        size_t n = 1 + (s % 299);
        for (size_t k = 0; k < n; k++) {
            s = s * 1103515245u + 12345u;
            r[k] = (uint8_t)(s >> 16);
        }
        if (i & 1) { /* half of them start like a real envelope, to get past the first bytes */
            r[0] = 0x08;
            r[1] = GUILD_PROTOCOL_VERSION;
        }
        guild_err_t err = {{0}};
        Guild__Envelope *d = guild_msg_decode(r, n, &err);
        accepted += d != NULL;
        if (!d)
            ck_assert(err.msg[0]);
        guild_msg_free(&d);
    }
    ck_assert_int_lt(accepted, 200);
}
END_TEST

START_TEST(test_router_dealer_conversation)
{
    guild_err_t err = {{0}};
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Register reg = GUILD__REGISTER__INIT;
    reg.role = GUILD__ROLE__ROLE_CPU_WORKER;
    reg.pid = (int32_t)getpid();
    reg.hostname = "localhost";
    env.body_case = GUILD__ENVELOPE__BODY_REGISTER_WORKER;
    env.register_worker = &reg;
    env.msg_id = 1;
    ck_assert_msg(guild_msg_send(dealer, NULL, &env, &err) == 0, "%s", err.msg);

    guild_msg_peer_t from;
    Guild__Envelope *got = NULL;
    ck_assert_int_eq(guild_msg_recv(router, 2000, &from, &got, &err), GUILD_MSG_OK);
    ck_assert_uint_eq(from.len, strlen("cpu-worker-0"));
    ck_assert(!memcmp(from.id, "cpu-worker-0", from.len));
    ck_assert_int_eq(got->body_case, GUILD__ENVELOPE__BODY_REGISTER_WORKER);
    ck_assert_int_eq(got->register_worker->pid, (int32_t)getpid());
    ck_assert_uint_eq(got->protocol_version, GUILD_PROTOCOL_VERSION);
    guild_msg_free(&got);

    Guild__Envelope reply = GUILD__ENVELOPE__INIT;
    Guild__Shutdown sd = GUILD__SHUTDOWN__INIT;
    sd.reason = "test over";
    reply.body_case = GUILD__ENVELOPE__BODY_SHUTDOWN;
    reply.shutdown = &sd;
    ck_assert_msg(guild_msg_send(router, &from, &reply, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(guild_msg_recv(dealer, 2000, NULL, &got, &err), GUILD_MSG_OK);
    ck_assert_str_eq(got->shutdown->reason, "test over");
    guild_msg_free(&got);

    /* nothing more: a timeout, not an error */
    ck_assert_int_eq(guild_msg_recv(dealer, 20, NULL, &got, &err), GUILD_MSG_TIMEOUT);
    ck_assert_ptr_null(got);

    /* a peer the ROUTER does not know */
    guild_msg_peer_t ghost = {{'g', 'h', 'o', 's', 't'}, 5};
    ck_assert_int_eq(guild_msg_send(router, &ghost, &reply, &err), -1);
    ck_assert_msg(strstr(err.msg, "ghost is not connected"), "%s", err.msg);

    /* an envelope over the limit is refused by the sender */
    char *huge = malloc(GUILD_MSG_MAX_BYTES + 10);
    memset(huge, 'a', GUILD_MSG_MAX_BYTES + 9);
    huge[GUILD_MSG_MAX_BYTES + 9] = '\0';
    sd.reason = huge;
    ck_assert_int_eq(guild_msg_send(dealer, NULL, &reply, &err), -1);
    ck_assert(strstr(err.msg, "exceeds"));
    free(huge);

    /* bad identities */
    ck_assert_ptr_null(guild_msg_dealer_new(zctx, endpoint, "", &err));
    ck_assert(strstr(err.msg, "routing id"));
}
END_TEST

/* Sends raw frames from the DEALER, bypassing the helpers. */
static void raw_send(const void *data, size_t len, int more)
{
    ck_assert_int_ge(zmq_send(dealer, data, len, more ? ZMQ_SNDMORE : 0), 0);
}

static void expect_bad(const char *needle)
{
    guild_err_t err = {{0}};
    guild_msg_peer_t from;
    Guild__Envelope *got = NULL;
    ck_assert_int_eq(guild_msg_recv(router, 2000, &from, &got, &err), GUILD_MSG_BAD);
    ck_assert_ptr_null(got);
    ck_assert_msg(strstr(err.msg, needle), "error \"%s\" lacks \"%s\"", err.msg, needle);
    ck_assert_uint_eq(from.len, strlen("cpu-worker-0")); /* known, so the receiver can answer */
}

static void expect_alive(void)
{
    /* a valid message still goes through, and the sender of garbage can be answered */
    guild_err_t err = {{0}};
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Heartbeat hb = GUILD__HEARTBEAT__INIT;
    hb.seq = 31337;
    env.body_case = GUILD__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    ck_assert_int_eq(guild_msg_send(dealer, NULL, &env, &err), 0);
    guild_msg_peer_t from;
    Guild__Envelope *got = NULL;
    ck_assert_int_eq(guild_msg_recv(router, 5000, &from, &got, &err), GUILD_MSG_OK);
    ck_assert_uint_eq(got->heartbeat->seq, 31337);
    guild_msg_free(&got);
    ck_assert_int_eq(guild_msg_send_error(router, &from, GUILD__ERROR_CODE__ERROR_PROTOCOL, 0, "bad message",
                                          &err), 0);
    ck_assert_int_eq(guild_msg_recv(dealer, 2000, NULL, &got, &err), GUILD_MSG_OK);
    ck_assert_int_eq(got->error->code, GUILD__ERROR_CODE__ERROR_PROTOCOL);
    ck_assert_str_eq(got->error->message, "bad message");
    guild_msg_free(&got);
}

START_TEST(test_router_rejects_garbage_and_survives)
{
    static const uint8_t junk[] = {0xde, 0xad, 0xbe, 0xef, 0x00, 0xff, 0x13, 0x37};
    raw_send(junk, sizeof junk, 0);
    expect_bad("malformed");
    expect_alive();

    raw_send("", 0, 0);
    expect_bad("empty message");

    raw_send(junk, sizeof junk, 1); /* three frames */
    raw_send(junk, sizeof junk, 1);
    raw_send(junk, sizeof junk, 0);
    expect_bad("3 frames");

    uint8_t buf[64];
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Shutdown sd = GUILD__SHUTDOWN__INIT;
    env.body_case = GUILD__ENVELOPE__BODY_SHUTDOWN;
    env.shutdown = &sd;
    env.protocol_version = GUILD_PROTOCOL_VERSION + 1;
    raw_send(buf, guild__envelope__pack(&env, buf), 0);
    char newer[32];
    snprintf(newer, sizeof newer, "protocol version %u", GUILD_PROTOCOL_VERSION + 1);
    expect_bad(newer);

    /* over the limit but under the transport's cap: a clear error */
    size_t over = GUILD_MSG_MAX_BYTES + 1;
    uint8_t *big = calloc(over, 1);
    raw_send(big, over, 0);
    expect_bad("exceeds");
    free(big);

    /* a burst of random garbage */
    uint32_t s = 99;
    for (int i = 0; i < 500; i++) {
        uint8_t r[200];
        size_t n = 1 + s % 199;
        for (size_t k = 0; k < n; k++) {
            s = s * 1103515245u + 12345u;
            r[k] = (uint8_t)(s >> 16);
        }
        raw_send(r, n, 0);
        guild_err_t err = {{0}};
        guild_msg_peer_t from;
        Guild__Envelope *got = NULL;
        guild_msg_result_t rc = guild_msg_recv(router, 2000, &from, &got, &err);
        ck_assert(rc == GUILD_MSG_BAD || rc == GUILD_MSG_OK);
        guild_msg_free(&got);
    }
    expect_alive();
}
END_TEST

START_TEST(test_absurd_message_drops_the_connection_not_the_receiver)
{
    /* beyond ZMQ_MAXMSGSIZE the transport disconnects the sender before buffering; the DEALER reconnects
     * and its next message arrives */
    size_t absurd = 4 * GUILD_MSG_MAX_BYTES + 1;
    uint8_t *big = calloc(absurd, 1);
    raw_send(big, absurd, 0);
    free(big);
    guild_err_t err = {{0}};
    guild_msg_peer_t from;
    Guild__Envelope *got = NULL;
    ck_assert_int_eq(guild_msg_recv(router, 300, &from, &got, &err), GUILD_MSG_TIMEOUT);
    expect_alive();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ipc_msg");
    TCase *tc = tcase_create("codec");
    tcase_add_test(tc, test_encode_decode_every_body);
    tcase_add_test(tc, test_decode_rejects_bad_envelopes);
    tcase_add_test(tc, test_decode_survives_random_and_truncated_input);
    suite_add_tcase(s, tc);

    tc = tcase_create("zmq");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, pair_setup, pair_teardown);
    tcase_add_test(tc, test_router_dealer_conversation);
    tcase_add_test(tc, test_router_rejects_garbage_and_survives);
    tcase_add_test(tc, test_absurd_message_drops_the_connection_not_the_receiver);
    suite_add_tcase(s, tc);

    return check_run(s);
}
