/* ipc/stage_copy.h — the copy kernel of the stager's threads.
 *
 * Staging slots are written once and then read by the GPU's DMA engine, never by this CPU: caching the
 * written lines only costs a read-for-ownership of each destination line and evicts useful data. Streaming
 * (non-temporal) stores skip both, and copy faster at every piece size measured (numbers:
 * bench/results/code-comment-measurements.md).
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
