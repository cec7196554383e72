/* SPDX-License-Identifier: MIT */
/*
 * crc32c.h - CRC-32C (Castagnoli), the checksum of the arena's journal
 * records: SSE4.2's crc32 instruction where the CPU has it (about 20 GB/s
 * a core), a table otherwise.  Not a content id: it catches torn and stale
 * records, not a chosen collision.
 */
#ifndef DMAR_CRC32C_H
#define DMAR_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue the CRC crc (0 to start) over buf[0..len). */
uint32_t dmar_crc32c(uint32_t crc, const void *buf, size_t len);
/* The same with the table, whatever the CPU has (for tests). */
uint32_t dmar_crc32c_table(uint32_t crc, const void *buf, size_t len);

#endif /* DMAR_CRC32C_H */
