/* tests/cuda/dev_guard.c — see dev_guard.h. */
#include "tests/cuda/dev_guard.h"

void *dev_new(size_t bytes)
{
    char *p = NULL;
    CK_CUDA(cudaMalloc((void **)&p, bytes + 2 * GUARD));
    CK_CUDA(cudaMemset(p, 0xff, bytes + 2 * GUARD));
    return p + GUARD;
}

void dev_free(void *p)
{
    if (p)
        cudaFree((char *)p - GUARD);
}

void *dev_upload(const void *h, size_t bytes)
{
    void *d = dev_new(bytes);
    CK_CUDA(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

void dev_download(void *h, const void *d, size_t bytes, cudaStream_t s)
{
    unsigned char guard[2 * GUARD];
    CK_CUDA(cudaStreamSynchronize(s));
    CK_CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    CK_CUDA(cudaMemcpy(guard, (const char *)d - GUARD, GUARD, cudaMemcpyDeviceToHost));
    CK_CUDA(cudaMemcpy(guard + GUARD, (const char *)d + bytes, GUARD, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 2 * GUARD; i++)
        ck_assert_msg(guard[i] == 0xff, "a kernel wrote outside its output (guard byte %d)", i);
}
