/*
 * crc32c.h - CRC-32C (Castagnoli, reflected polynomial 0x82F63B78).
 *
 * crc32c() picks the SSE4.2 crc32 instruction when the CPU has it and a
 * portable table-driven version otherwise; both are exported so tests can
 * hold them to the same known vectors.  All functions take and return the
 * *finalised* CRC, so they chain: crc32c(crc32c(0, a, n), b, m) equals the
 * CRC of a followed by b.  Start with 0.
 */
#ifndef MOEFT_CRC32C_H
#define MOEFT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t crc32c(uint32_t crc, const void *buf, size_t len);
/* Copy len bytes from src to dst (not overlapping) and return the CRC of
 * them, in one pass over the data. */
uint32_t crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len);
/* The CRC of A followed by B, from crc1 = crc32c(0, A, ...), crc2 =
 * crc32c(0, B, len2) and len2 alone. */
uint32_t crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);
/* crc32c(crc, len zero bytes), in O(log len) without reading them. */
uint32_t crc32c_zeros(uint32_t crc, uint64_t len);
uint32_t crc32c_portable(uint32_t crc, const void *buf, size_t len);
/* Only valid where crc32c_hw_available() is true. */
uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len);
int crc32c_hw_available(void);

#endif
