/* tests/cuda/dev_guard.h — device buffers for the CUDA tests with GUARD bytes of poison on each side, so that a
 * kernel writing outside its output fails the test that downloads it. Check-suite helpers (they assert). */
#ifndef GUILD_TESTS_CUDA_DEV_GUARD_H
#define GUILD_TESTS_CUDA_DEV_GUARD_H

#include <stddef.h>

#include <check.h>
#include <cuda_runtime_api.h>

#define GUARD 64 /* bytes of poison before and after every device output */

#define CK_CUDA(call) ck_assert_msg((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

/* Device buffer of `bytes` with GUARD poison bytes on each side; returns the inner pointer. */
void *dev_new(size_t bytes);
void dev_free(void *p);
/* dev_new, then h[0..bytes) copied in. */
void *dev_upload(const void *h, size_t bytes);
/* Copies the output back once stream s is done, and checks both guards are still poison. */
void dev_download(void *h, const void *d, size_t bytes, cudaStream_t s);

#endif
