/* Each worker role's options record against its wire form (gpu-worker/gpu_worker_options.h,
 * cpu-expert-worker/cpu_worker_options.h, stager/stager_options.h): a message with every field set — found
 * through the protobuf descriptors, so a field added to a message later is set too — goes to the record and
 * back, and must come back the same bytes; a field that a conversion forgets fails, named. A record field
 * added without a wire field trips the size checks below. Then each record's one check, and guild-stager's
 * command line as the supervisor writes it. */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/stack_options.h"
#include "cpu-expert-worker/cpu_worker_options.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"
#include "gpu-worker/gpu_worker_options.h"
#include "stager/stager_options.h"
#include "tests/check_run.h"

/* A record field added without carrying it on the wire fails here: give it a field in the role's message and
 * its conversion (or a reason to stay local, like cuda_config_t's expert_host, wiring the GPU worker builds from
 * the expert stores, and its test.context, a hook of the in-process CUDA tests only), then update the size. */
_Static_assert(sizeof(void *) != 8 || sizeof(gpu_worker_options_t) == 200,
               "gpu_worker_options_t changed: carry the new field in GpuWorkerOptions (or say why not)");
_Static_assert(sizeof(void *) != 8 || sizeof(cuda_config_t) == 80,
               "cuda_config_t changed: carry the new field in CudaOptions (or say why not)");
_Static_assert(sizeof(void *) != 8 || sizeof(cpu_worker_options_t) == 96,
               "cpu_worker_options_t changed: carry the new field in CpuWorkerOptions (or say why not)");

/* Every field of message m set to a value of its own (nonzero: proto3 sends only those), nested messages and
 * repeated fields (two elements) included; memory from malloc, freed by protobuf_c_message_free_unpacked. */
static void fill(ProtobufCMessage *m, unsigned *seed)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        ck_assert_msg(f->label != PROTOBUF_C_LABEL_OPTIONAL && f->label != PROTOBUF_C_LABEL_REQUIRED &&
                          !(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF),
                      "%s.%s: this test fills proto3 plain and repeated fields only", d->name, f->name);
        const bool rep = f->label == PROTOBUF_C_LABEL_REPEATED;
        const size_t n = rep ? 2 : 1;
        size_t elem;
        switch (f->type) {
        case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
        case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_ENUM:
        case PROTOBUF_C_TYPE_FLOAT: case PROTOBUF_C_TYPE_BOOL: elem = 4; break;
        case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
        case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE: elem = 8; break;
        case PROTOBUF_C_TYPE_STRING: case PROTOBUF_C_TYPE_MESSAGE: elem = sizeof(void *); break;
        case PROTOBUF_C_TYPE_BYTES: elem = sizeof(ProtobufCBinaryData); break;
        default: ck_abort_msg("%s.%s: a field type this test does not fill", d->name, f->name); return;
        }
        uint8_t *vals = rep ? calloc(n, elem) : (uint8_t *)m + f->offset;
        ck_assert_ptr_nonnull(vals);
        for (size_t k = 0; k < n; k++) {
            void *v = vals + k * elem;
            const unsigned s = (*seed)++;
            switch (f->type) {
            case PROTOBUF_C_TYPE_FLOAT: *(float *)v = (float)s + 0.5f; break;
            case PROTOBUF_C_TYPE_DOUBLE: *(double *)v = (double)s + 0.25; break;
            case PROTOBUF_C_TYPE_BOOL: *(protobuf_c_boolean *)v = 1; break;
            case PROTOBUF_C_TYPE_ENUM: {
                const ProtobufCEnumDescriptor *e = f->descriptor;
                *(int32_t *)v = e->values[e->n_values - 1].value;
                break;
            }
            case PROTOBUF_C_TYPE_STRING: {
                char *str = malloc(24);
                ck_assert_ptr_nonnull(str);
                snprintf(str, 24, "%s-%u", f->name, s);
                *(char **)v = str;
                break;
            }
            case PROTOBUF_C_TYPE_BYTES: {
                ProtobufCBinaryData *b = v;
                ck_assert_ptr_nonnull(b->data = malloc(3));
                b->len = 3;
                b->data[0] = (uint8_t)s, b->data[1] = (uint8_t)(s + 1), b->data[2] = (uint8_t)(s + 2);
                break;
            }
            case PROTOBUF_C_TYPE_MESSAGE: {
                const ProtobufCMessageDescriptor *sd = f->descriptor;
                ProtobufCMessage *sub = malloc(sd->sizeof_message);
                ck_assert_ptr_nonnull(sub);
                sd->message_init(sub);
                fill(sub, seed);
                *(ProtobufCMessage **)v = sub;
                break;
            }
            default:
                if (elem == 4)
                    *(uint32_t *)v = s;
                else
                    *(uint64_t *)v = (uint64_t)s << 33 | s; /* past 32 bits: no narrowing on the way */
            }
        }
        if (rep) {
            *(size_t *)((uint8_t *)m + f->quantifier_offset) = n;
            *(void **)((uint8_t *)m + f->offset) = vals;
        }
    }
}

/* The field `name` of m, a uint32 set to v (fields whose range the record checks on the way in). */
static void set_u32(ProtobufCMessage *m, const char *name, uint32_t v)
{
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(f->type, PROTOBUF_C_TYPE_UINT32);
    *(uint32_t *)((uint8_t *)m + f->offset) = v;
}

/* The first field (dotted path) where a and b differ, into what; false when none does. */
static bool differs(const ProtobufCMessage *a, const ProtobufCMessage *b, char *what, size_t n)
{
    const ProtobufCMessageDescriptor *d = a->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const bool rep = f->label == PROTOBUF_C_LABEL_REPEATED;
        const uint8_t *pa = (const uint8_t *)a + f->offset, *pb = (const uint8_t *)b + f->offset;
        size_t na = 1, nb = 1;
        if (rep) {
            na = *(const size_t *)((const uint8_t *)a + f->quantifier_offset);
            nb = *(const size_t *)((const uint8_t *)b + f->quantifier_offset);
            pa = *(const uint8_t *const *)pa;
            pb = *(const uint8_t *const *)pb;
        }
        bool diff = na != nb;
        for (size_t k = 0; k < na && !diff; k++) {
            if (f->type == PROTOBUF_C_TYPE_STRING) {
                const char *sa = ((const char *const *)pa)[k], *sb = ((const char *const *)pb)[k];
                diff = strcmp(sa ? sa : "", sb ? sb : "") != 0;
            } else if (f->type == PROTOBUF_C_TYPE_BYTES) {
                const ProtobufCBinaryData *ba = &((const ProtobufCBinaryData *)pa)[k];
                const ProtobufCBinaryData *bb = &((const ProtobufCBinaryData *)pb)[k];
                diff = ba->len != bb->len || (ba->len && memcmp(ba->data, bb->data, ba->len) != 0);
            } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
                const ProtobufCMessage *ma = ((const ProtobufCMessage *const *)pa)[k];
                const ProtobufCMessage *mb = ((const ProtobufCMessage *const *)pb)[k];
                if (!ma || !mb) {
                    diff = ma != mb;
                } else if (differs(ma, mb, what, n)) {
                    const size_t len = strlen(f->name) + 1; /* "name." before the inner path */
                    if (strlen(what) + len < n) {
                        memmove(what + len, what, strlen(what) + 1);
                        memcpy(what, f->name, len - 1);
                        what[len - 1] = '.';
                    }
                    return true;
                }
            } else {
                const size_t elem = f->type == PROTOBUF_C_TYPE_DOUBLE || f->type == PROTOBUF_C_TYPE_INT64 ||
                                            f->type == PROTOBUF_C_TYPE_UINT64 || f->type == PROTOBUF_C_TYPE_SINT64 ||
                                            f->type == PROTOBUF_C_TYPE_FIXED64 || f->type == PROTOBUF_C_TYPE_SFIXED64
                                        ? 8
                                        : 4;
                diff = memcmp(pa + k * elem, pb + k * elem, elem) != 0;
            }
        }
        if (diff) {
            snprintf(what, n, "%s", f->name);
            return true;
        }
    }
    return false;
}

/* The wire bytes of m (caller frees). */
static uint8_t *packed(const ProtobufCMessage *m, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(*len ? *len : 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(protobuf_c_message_pack(m, buf), *len);
    return buf;
}

/* Sent (every field set) against what came back from the record: the same bytes, else the field named. */
static void assert_same(const ProtobufCMessage *sent, const ProtobufCMessage *back, const char *role)
{
    size_t la, lb;
    uint8_t *a = packed(sent, &la), *b = packed(back, &lb);
    char what[256] = "";
    ck_assert_msg(!differs(sent, back, what, sizeof what), "%s: field %s does not survive the record", role, what);
    ck_assert_msg(la == lb && !memcmp(a, b, la), "%s: %zu bytes sent, %zu came back", role, la, lb);
    free(a);
    free(b);
}

START_TEST(test_gpu_worker_options_round_trip)
{
    unsigned seed = 1;
    Guild__GpuWorkerOptions *m = malloc(sizeof *m);
    ck_assert_ptr_nonnull(m);
    guild__gpu_worker_options__init(m);
    fill(&m->base, &seed);
    ck_assert_ptr_nonnull(m->cuda);
    set_u32(&m->cuda->base, "stager", CUDA_STAGER_PIN); /* the record holds a cuda_stager_t */
    set_u32(&m->base, "kv_type", KV_TYPE_K8V4);          /* and a KV_TYPE_* */
    size_t len;
    uint8_t *bytes = packed(&m->base, &len);
    Guild__GpuWorkerOptions *got = guild__gpu_worker_options__unpack(NULL, len, bytes); /* as a worker reads it */
    ck_assert_ptr_nonnull(got);
    gpu_worker_options_t o;
    guild_err_t err = {{0}};
    ck_assert_msg(gpu_worker_options_from_proto(&o, got, &err) == 0, "%s", err.msg);
    gpu_worker_options_msg_t back;
    gpu_worker_options_to_proto(&o, &back);
    assert_same(&m->base, &back.m.base, "GpuWorkerOptions");
    /* without CudaOptions: the cuda backend's defaults */
    Guild__CudaOptions *cuda = got->cuda;
    got->cuda = NULL;
    ck_assert_msg(gpu_worker_options_from_proto(&o, got, &err) == 0, "%s", err.msg);
    got->cuda = cuda;
    cuda_config_t zero;
    memset(&zero, 0, sizeof zero);
    ck_assert(!memcmp(&o.cuda, &zero, sizeof zero));
    /* numbers the record cannot hold, and a stager it does not know */
    got->n_ctx = 1u << 31;
    ck_assert_int_eq(gpu_worker_options_from_proto(&o, got, &err), -1);
    ck_assert_msg(strstr(err.msg, "n_ctx 2147483648 is out of range"), "%s", err.msg);
    protobuf_c_message_free_unpacked(&got->base, NULL);
    got = guild__gpu_worker_options__unpack(NULL, len, bytes);
    got->cuda->stager = CUDA_STAGER_LAST + 1;
    ck_assert_int_eq(gpu_worker_options_from_proto(&o, got, &err), -1);
    ck_assert_msg(strstr(err.msg, "stager 5 is not one this worker knows"), "%s", err.msg);
    protobuf_c_message_free_unpacked(&got->base, NULL);
    got = guild__gpu_worker_options__unpack(NULL, len, bytes);
    got->kv_type = KV_TYPE_LAST + 1;
    ck_assert_int_eq(gpu_worker_options_from_proto(&o, got, &err), -1);
    ck_assert_msg(strstr(err.msg, "KV cache format 6 is not one this worker knows"), "%s", err.msg);
    protobuf_c_message_free_unpacked(&got->base, NULL);
    free(bytes);
    protobuf_c_message_free_unpacked(&m->base, NULL);
}
END_TEST

START_TEST(test_cpu_worker_options_round_trip)
{
    unsigned seed = 100;
    Guild__CpuWorkerOptions *m = malloc(sizeof *m);
    ck_assert_ptr_nonnull(m);
    guild__cpu_worker_options__init(m);
    fill(&m->base, &seed);
    set_u32(&m->base, "expert_layout", EXPERT_LAYOUT_PACKED); /* the record holds an expert_layout_t */
    size_t len;
    uint8_t *bytes = packed(&m->base, &len);
    Guild__CpuWorkerOptions *got = guild__cpu_worker_options__unpack(NULL, len, bytes);
    ck_assert_ptr_nonnull(got);
    cpu_worker_options_t o;
    guild_err_t err = {{0}};
    ck_assert_msg(cpu_worker_options_from_proto(&o, got, &err) == 0, "%s", err.msg);
    Guild__CpuWorkerOptions back;
    cpu_worker_options_to_proto(&o, &back);
    assert_same(&m->base, &back.base, "CpuWorkerOptions");
    got->expert_layout = EXPERT_LAYOUT_PACKED + 1;
    ck_assert_int_eq(cpu_worker_options_from_proto(&o, got, &err), -1);
    ck_assert_msg(strstr(err.msg, "expert layout 3 is not one this worker knows"), "%s", err.msg);
    protobuf_c_message_free_unpacked(&got->base, NULL);
    free(bytes);
    protobuf_c_message_free_unpacked(&m->base, NULL);
}
END_TEST

START_TEST(test_stager_options_round_trip)
{
    unsigned seed = 200;
    Guild__StagerOptions *m = malloc(sizeof *m);
    ck_assert_ptr_nonnull(m);
    guild__stager_options__init(m);
    fill(&m->base, &seed);
    size_t len;
    uint8_t *bytes = packed(&m->base, &len);
    Guild__StagerOptions *got = guild__stager_options__unpack(NULL, len, bytes);
    ck_assert_ptr_nonnull(got);
    stager_options_t o;
    guild_err_t err = {{0}};
    ck_assert_msg(stager_options_from_proto(&o, got, &err) == 0, "%s", err.msg);
    Guild__StagerOptions back;
    char *names[STAGER_MAX_RINGS];
    stager_options_to_proto(&o, &back, names);
    assert_same(&m->base, &back.base, "StagerOptions");
    protobuf_c_message_free_unpacked(&got->base, NULL);
    free(bytes);
    protobuf_c_message_free_unpacked(&m->base, NULL);
}
END_TEST

/* A GPU worker record as the supervisor makes one (stack_options_init's defaults completed), then one broken
 * field at a time: each refused by the one check, naming it. */
static gpu_worker_options_t good_gpu(void)
{
    stack_options_t so;
    stack_options_init(&so);
    gpu_worker_options_t g = so.gpu;
    g.backend = "cuda";
    g.n_ctx = 64;
    g.n_batch = 16;
    g.n_threads = 2;
    return g;
}

START_TEST(test_gpu_worker_options_check)
{
    guild_err_t err = {{0}};
    gpu_worker_options_t g = good_gpu();
    ck_assert_msg(gpu_worker_options_check(&g, &err) == 0, "%s", err.msg);
    ck_assert_ptr_eq(gpu_worker_options_backend_config(&g), &g.cuda);
    static const uint32_t layers[] = {1, 3};
    g.cuda.resident_layers = layers;
    g.cuda.n_resident_layers = 2;
    g.cuda.stager = CUDA_STAGER_PROCESS;
    g.cuda.stage_ring = "/proc/1/fd/3";
    ck_assert_msg(gpu_worker_options_check(&g, &err) == 0, "%s", err.msg);
    char what[512];
    gpu_worker_options_describe(&g, what, sizeof what);
    ck_assert_msg(strstr(what, "backend cuda, ctx 64, batch 16") && strstr(what, "stager process, 2 resident"),
                  "%s", what);
    static const char *want[] = {
        "needs options backend",       "needs options backend",        "max_out 17 is more than n_batch 16",
        "n_threads -1",                "gpu_expert_layers -2",         "stager 9 is not one this worker knows",
        "stage_threads 257 (0..256)",  "stager process without a staging ring",
        "a staging ring for a stager other than process",                "test_split_gpu_fraction 1.5",
        "leaves the experts of 2 layers to the GPU alone, backend cpu keeps none",
    };
    for (int i = 0; i < (int)(sizeof want / sizeof want[0]); i++) {
        gpu_worker_options_t b = g;
        switch (i) {
        case 0: b.backend = NULL; break;
        case 1: b.n_ctx = 0; break;
        case 2: b.max_out = 17; break;
        case 3: b.n_threads = -1; break;
        case 4: b.cuda.gpu_expert_layers = -2; break;
        case 5: b.cuda.stager = (cuda_stager_t)9; break;
        case 6: b.cuda.stage_threads = 257; break;
        case 7: b.cuda.stage_ring = NULL; break;
        case 8: b.cuda.stager = CUDA_STAGER_THREAD; break;
        case 9: b.cuda.test.split_gpu_fraction = 1.5; break;
        case 10: b.backend = "cpu"; break;
        }
        err.msg[0] = '\0';
        ck_assert_msg(gpu_worker_options_check(&b, &err) == -1, "case %d accepted", i);
        ck_assert_msg(strstr(err.msg, want[i]), "case %d: '%s' lacks '%s'", i, err.msg, want[i]);
    }
    /* a backend without settings takes none */
    g.backend = "cpu";
    ck_assert_ptr_null(gpu_worker_options_backend_config(&g));
}
END_TEST

START_TEST(test_cpu_worker_options_check)
{
    guild_err_t err = {{0}};
    stack_options_t so;
    stack_options_init(&so);
    cpu_worker_options_t c = so.cpu;
    ck_assert_msg(cpu_worker_options_check(&c, &err) == 0, "%s", err.msg);
    static const uint32_t cpus[] = {0, 1};
    c.cpus = cpus;
    c.n_cpus = 2;
    c.node = 0;
    ck_assert_msg(cpu_worker_options_check(&c, &err) == 0, "%s", err.msg);
    static const uint32_t share[] = {1, 3}, unsorted[] = {3, 1}, big[] = {0, 256};
    c.share_with = share;
    c.n_share_with = 2;
    ck_assert_msg(cpu_worker_options_check(&c, &err) == 0, "%s", err.msg);
    static const char *want[] = {"n_threads 5000", "row blocks gate/up 2097152", "expert layout 3",
                                 "CPUs given without their node", "share_with[1] = 1", "share_with[1] = 256"};
    for (int i = 0; i < 6; i++) {
        cpu_worker_options_t b = c;
        switch (i) {
        case 0: b.n_threads = 5000; break;
        case 1: b.gate_up_rows = 1 << 21; break;
        case 2: b.expert_layout = (expert_layout_t)3; break;
        case 3: b.node = -1; break;
        case 4: b.share_with = unsorted; break;
        case 5: b.share_with = big; break;
        }
        err.msg[0] = '\0';
        ck_assert_msg(cpu_worker_options_check(&b, &err) == -1, "case %d accepted", i);
        ck_assert_msg(strstr(err.msg, want[i]), "case %d: '%s' lacks '%s'", i, err.msg, want[i]);
    }
}
END_TEST

/* guild-stager's command line as the supervisor writes it: parsed into the record the Assign must match. */
START_TEST(test_stager_command_line)
{
    guild_err_t err = {{0}};
    stager_options_t o, a;
    char *argv[] = {"guild-stager", "-m", "/m.gguf", "--ring", "/proc/7/fd/9", "--threads", "3", "--connect",
                    "ipc:///tmp/c", "-v", NULL};
    ck_assert_msg(stager_options_parse(&o, 10, argv, &err) == 0, "%s", err.msg);
    ck_assert_msg(stager_options_check(&o, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(o.model, "/m.gguf");
    ck_assert_int_eq(o.n_rings, 1);
    ck_assert_str_eq(o.rings[0], "/proc/7/fd/9");
    ck_assert_int_eq(o.threads, 3);
    ck_assert_str_eq(o.endpoint, "ipc:///tmp/c");
    ck_assert_int_eq(o.verbose, 1);
    a = o;
    ck_assert_msg(stager_options_match(&o, &a, &err) == 0, "%s", err.msg);
    a.threads = 4;
    ck_assert_int_eq(stager_options_match(&o, &a, &err), -1);
    ck_assert_msg(strstr(err.msg, "4 copy threads asked, this stager runs 3"), "%s", err.msg);
    a = o;
    snprintf(a.rings[0], sizeof a.rings[0], "/proc/7/fd/10");
    ck_assert_int_eq(stager_options_match(&o, &a, &err), -1);
    ck_assert_msg(strstr(err.msg, "ring /proc/7/fd/10 asked, this stager serves /proc/7/fd/9"), "%s", err.msg);
    char *fd[] = {"guild-stager", "-m", "/m.gguf", "--ring", "fd:5", NULL};
    ck_assert_msg(stager_options_parse(&o, 5, fd, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(o.rings[0], "/proc/self/fd/5");
    char *none[] = {"guild-stager", "-m", "/m.gguf", NULL};
    ck_assert_int_eq(stager_options_parse(&o, 3, none, &err), 0);
    ck_assert_int_eq(stager_options_check(&o, &err), -1);
    ck_assert_msg(strstr(err.msg, "at least one --ring NAME is required"), "%s", err.msg);
    char *bad[] = {"guild-stager", "--threads", "0", NULL};
    ck_assert_int_eq(stager_options_parse(&o, 3, bad, &err), -1);
    char *odd[] = {"guild-stager", "--frobnicate", NULL};
    ck_assert_int_eq(stager_options_parse(&o, 2, odd, &err), -2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("options");
    TCase *tc = tcase_create("wire");
    tcase_add_test(tc, test_gpu_worker_options_round_trip);
    tcase_add_test(tc, test_cpu_worker_options_round_trip);
    tcase_add_test(tc, test_stager_options_round_trip);
    suite_add_tcase(s, tc);
    TCase *tk = tcase_create("check");
    tcase_add_test(tk, test_gpu_worker_options_check);
    tcase_add_test(tk, test_cpu_worker_options_check);
    tcase_add_test(tk, test_stager_command_line);
    suite_add_tcase(s, tk);
    return check_run(s);
}
