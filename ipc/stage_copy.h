/* ipc/stage_copy.h — the copy kernel of the stager's threads.
 *
 * Staging slots are written once and then read by the GPU's DMA engine, never by this CPU: caching the
 * written lines only costs a read-for-ownership of each destination line and evicts useful data. Streaming
 * (non-temporal) stores skip both: 5.1 -> 9.0 GB/s for 1 MiB pieces, 5.7 -> 8.1 GB/s for 16 MiB ones, one
 * thread on the 2-vCPU CI VM (page cache to a shared-memory slot).
 */
#ifndef GUILD_IPC_STAGE_COPY_H
#define GUILD_IPC_STAGE_COPY_H

#include <stddef.h>

/* Copies n bytes from src to dst (no overlap): the same bytes as memcpy (its reference), written with
 * streaming stores where the CPU has them (x86-64: SSE2, any alignment) and memcpy elsewhere or for short
 * copies. Ends with a store fence: the bytes are globally visible before any later store of this thread (the
 * one that says the slot is filled). */
void stage_copy_stream(void *dst, const void *src, size_t n);

#endif
