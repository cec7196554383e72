/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <string.h>
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
