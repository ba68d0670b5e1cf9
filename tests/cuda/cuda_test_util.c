/* tests/cuda/cuda_test_util.c — see cuda_test_util.h. */
#include "tests/cuda/cuda_test_util.h"

#include <stdio.h>
#include <string.h>

#include "gpu-worker/dense/cuda/cuda_util.h"

bool cuda_test_device(int min_major)
{
    char why[256];
    if (cuda_device_count(why, sizeof why) < 1) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return false;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        if (min_major <= 0)
            return true;
        printf("SKIP: the device's compute capability is unknown (%d.0 or more needed)\n", min_major);
        return false;
    }
    printf("device: %s, %d SMs, sm_%d%d, %.1f GiB\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor,
           (double)prop.totalGlobalMem / (1 << 30));
    if (prop.major < min_major) {
        printf("SKIP: compute capability %d.0 or more needed\n", min_major);
        return false;
    }
    return true;
}

int cuda_test_run(Suite *s, cudaStream_t *stream)
{
    if (stream && cudaStreamCreate(stream) != cudaSuccess) {
        printf("cannot create a CUDA stream: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (stream)
        cudaStreamDestroy(*stream);
    return failed ? 1 : 0;
}

void cuda_test_shape(tiny_spec_t *s, guild_type_t type, uint64_t seed)
{
    s->n_embd = 256;
    s->n_head = 4;
    s->n_head_kv = 2;
    s->head_dim = 64;
    s->n_ff_exp = 256;
    s->n_ff_shexp = 256;
    s->n_vocab = 256;
    s->wtype = type;
    s->seed = seed;
}

void cuda_test_spec(tiny_spec_t *s, guild_type_t type, uint64_t seed)
{
    cuda_test_shape(s, type, seed);
    s->n_ff = 512;                                   /* glm4moe's dense first layer */
    s->n_rot = !strcmp(s->arch, "glm4moe") ? 32 : 0; /* its half-rotary heads */
    s->n_mtp = 1;                                    /* its MTP layer (check_cuda_mtp runs it) */
    if (!strcmp(s->arch, "deepseek2")) { /* keys of 32 + 32 rotated, values of 32, a latent of 64, a q LoRA of 32 */
        s->n_rot = 32;
        s->head_dim_v = 32;
    }
}

void cuda_test_forward(backend_t *be, int32_t n, const int32_t *tokens, int32_t n_out, const int32_t *rows,
                       float *logits)
{
    guild_err_t err = {{0}};
    int32_t pos[512];
    ck_assert(n <= 512);
    for (int32_t i = 0; i < n; i++)
        pos[i] = backend_kv_len(be) + i;
    ck_assert_msg(backend_forward(be, n, tokens, pos, n_out, rows, logits, &err) == 0, "%s: %s", be->ops->name,
                  err.msg);
}

int32_t cuda_test_argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}
