/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <string.h>
#include <sys/uio.h>

#include "block.h"

void dmar_block_check(const uint8_t *hdr12, const uint8_t *table, size_t table_len,
		      const struct dmar_id *ids, unsigned n, uint8_t out[8])
{
	struct iovec iov[3] = {
		{ (void *)hdr12, 12 },
		{ (void *)table, table_len },
		{ (void *)ids, (size_t)n * DMAR_HASH_SIZE },
	};
	struct dmar_id h;
	dmar_hash_iov(iov, 3, &h);
	memcpy(out, h.b, 8);
}
