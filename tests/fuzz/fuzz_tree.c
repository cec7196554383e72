/* SPDX-License-Identifier: MIT */
/*
 * fuzz_tree - a tree commit's header and operations (net/wire.h) on
 * arbitrary bytes, as POST /v1/tree reads them.
 *
 * The input is a header and the operation records (no chunk batch: that
 * is fuzz_batch's).  Whatever the header parse accepts is walked record by
 * record: each refusal must be -EBADMSG with a message naming its
 * operation; each record accepted must hold a path dmar_wire_path_check
 * takes, data inside the input, and write back (dmar_tree_write_op) to
 * exactly the bytes it was read from: one encoding an operation.  A
 * file's data then goes through the recipe parser, which must accept or
 * refuse with a message.  Anything else aborts.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/recipe.h"
#include "net/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what)
{
	fprintf(stderr, "fuzz_tree: %s\n", what);
	abort();
}

static void refused(int r, const struct dmar_error *err, const char *what)
{
	if (r != -EBADMSG || err->code != r || !err->msg[0])
		die(what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < DMAR_TREE_HDR_SIZE)
		return 0;
	uint32_t count, ops_len;
	struct dmar_error err = { 0 };
	int r = dmar_tree_header_parse(data, &count, &ops_len, &err);
	if (r < 0) {
		refused(r, &err, "header: refused without -EBADMSG and a message");
		return 0;
	}
	if (!count || count > DMAR_TREE_OPS_MAX || ops_len > DMAR_TREE_OPS_BYTES_MAX || ops_len % 8)
		die("header: accepted out of bounds");
	const uint8_t *ops = data + DMAR_TREE_HDR_SIZE;
	size_t len = size - DMAR_TREE_HDR_SIZE < ops_len ? size - DMAR_TREE_HDR_SIZE : ops_len;
	struct dmar_tree_op *op = malloc(sizeof(*op));
	uint8_t *back = malloc(len + 8);
	if (!op || !back)
		die("out of memory");
	size_t pos = 0;
	for (uint32_t k = 0; k < count; k++) {
		size_t at = pos;
		memset(&err, 0, sizeof(err));
		r = dmar_tree_op_parse(ops, len, &pos, k, op, &err);
		if (r < 0) {
			refused(r, &err, "op: refused without -EBADMSG and a message");
			char want[32];
			snprintf(want, sizeof(want), "operation %u", k);
			if (!strstr(err.msg, want))
				die("op: the message does not name the operation");
			if (pos != at)
				die("op: refused but moved on");
			break;
		}
		if (pos <= at || pos > len || (pos - at) % 8)
			die("op: accepted, but where it ends is wrong");
		if (dmar_wire_path_check(op->path, NULL) < 0 || !op->path[0])
			die("op: accepted a path the policy refuses");
		if (op->data_len && (op->data < ops + at || op->data + op->data_len > ops + pos))
			die("op: data outside its record");
		if (dmar_tree_op_size(strlen(op->path), op->data_len) != pos - at ||
		    dmar_tree_write_op(back, op) != pos - at || memcmp(back, ops + at, pos - at) != 0)
			die("op: does not write back to its bytes");
		if (op->kind == DMAR_TREE_FILE) {
			struct dmar_recipe rc;
			struct dmar_id cid;
			memset(&err, 0, sizeof(err));
			r = dmar_recipe_parse_cid(op->data, op->data_len, &rc, &cid, &err);
			if (r == 0)
				dmar_recipe_free(&rc);
			else if (r != -ENOMEM)
				refused(r, &err, "op: its recipe refused without -EBADMSG and a message");
		}
	}
	free(op);
	free(back);
	return 0;
}
