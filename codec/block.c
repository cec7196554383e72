/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "block.h"

void dmar_block_check(uint64_t index, uint64_t offset, const uint8_t *hdr12, const uint8_t *table,
		      size_t table_len, const struct dmar_id *ids, unsigned n, uint8_t out[8])
{
	uint8_t where[16];
	dmar_put_le64(where, index);
	dmar_put_le64(where + 8, offset);
	struct iovec iov[4] = {
		{ where, 16 },
		{ (void *)hdr12, 12 },
		{ (void *)table, table_len },
		{ (void *)ids, (size_t)n * DMAR_HASH_SIZE },
	};
	struct dmar_id h;
	dmar_hash_iov(iov, 4, &h);
	memcpy(out, h.b, 8);
}

void *dmar_block_buf_alloc(size_t len)
{
	enum { HUGE = 2u << 20 };
	size_t cap = (len + HUGE - 1) & ~(size_t)(HUGE - 1);
	void *p;
	if (!cap || posix_memalign(&p, HUGE, cap) != 0)
		return NULL;
#ifdef MADV_HUGEPAGE
	madvise(p, cap < DMAR_BLOCK_TARGET ? cap : DMAR_BLOCK_TARGET, MADV_HUGEPAGE);
#endif
	return p;
}

/* n bytes: from DMAR_BLOCK_BUF_HUGE_MIN on huge pages, below malloc'd. */
static void *buf_new(size_t n)
{
	return n >= DMAR_BLOCK_BUF_HUGE_MIN ? dmar_block_buf_alloc(n) : malloc(n);
}

int dmar_block_buf_reserve(struct dmar_block_buf *b, size_t n, size_t max)
{
	if (n <= b->cap)
		return 0;
	if (n >= DMAR_BLOCK_BUF_HUGE_MIN && n < max)
		n = max;
	uint8_t *p = buf_new(n);
	if (!p)
		return -ENOMEM;
	free(b->p);
	b->p = p;
	b->cap = n;
	return 0;
}

void dmar_block_buf_free(struct dmar_block_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->cap = 0;
}

void *dmar_block_zalloc(void *opaque, size_t size)
{
	(void)opaque;
	return buf_new(size);
}

void dmar_block_zfree(void *opaque, void *p)
{
	(void)opaque;
	free(p);
}
